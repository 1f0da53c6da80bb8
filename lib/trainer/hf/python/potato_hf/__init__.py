"""The Python trainers of potato-training (hf-text-classification,
hf-span, hf-llm-classification and embed-logreg), by concern:

    spec       the run's spec.json and params, the exit codes and errors
    events     the v1 event protocol on standard output
    data       the bundle, each schema's labels and examples, prediction rows
    ordinal    likert schemas: the cumulative binary decomposition
    packages   which packages a run needs, their versions, importing them
    device     the torch device, the precision, the seeds, out of memory
    hub        pretrained models by directory or name, offline first
    models     the built-in n-gram model and transformers models, with LoRA
    loop       the fit and predict loop
    artifacts  the saved models, their model cards, the renames into place
    spans      hf-span's spans as BIO tags of tokens and back, by character
    span_loop  hf-span's token classifier: its model, fit and predictions
    main       the command
    llm        hf-llm-classification: the same loop on a decoder LLM, quantized
               or not, made that trainer by its launcher (llm.install)
    memory     the memory a decoder's LoRA fit needs, estimated before it
    zeroshot   hf-llm-classification's mode=zero-shot
    embed      the embed-logreg trainer: a frozen sentence encoder's
               vectors and scikit-learn's logistic regression heads,
               with its own command (embed_logreg.py)

and params.json, the table of its parameters, which the Go registry of
potato-training reads too.

Every module imports with the standard library alone: loop imports torch,
transformers and peft once packages has checked them, and passes them to
the functions that need them. Python 3.8 or newer; torch 1.13 or newer.
"""
