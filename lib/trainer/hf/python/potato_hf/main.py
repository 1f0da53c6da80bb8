"""The command: --spec SPEC, checked before anything is imported, then the
training loop; every way it ends becomes its event and exit code
(potato-events(5))."""

import argparse
import sys

from .device import is_oom
from .events import Events
from .loop import Stop, train
from .span_loop import TRAINER as SPAN_TRAINER, check_span_schemas, span_params, train as train_spans
from .spec import (Cancelled, EXIT_BAD_SPEC, EXIT_CANCELLED, EXIT_FINISHED, EXIT_OUT_OF_MEMORY, EXIT_UNEXPECTED, TRAINER,
                   TrainerError, check_schemas, parse_params, read_spec)


def main(argv=None, stdout=None, stderr=None, env=None, trainer=TRAINER, train=train):
    """Runs the trainer (hf-text-classification, SPAN_TRAINER: the token
    classifier of span_loop, or another trainer of the loop, whose train
    calls loop.train: hf-llm-classification); returns its exit code."""
    span = trainer == SPAN_TRAINER

    def check(spec):
        if span:
            span_params(spec["params"])
            check_span_schemas(spec)
        else:
            parse_params(spec["params"])
            check_schemas(spec)
    return run(argv, stdout, stderr, env, trainer, "Fine-tune a %s on a potato-training bundle." % (
        "token classifier" if span else "text classifier"), check, train_spans if span else train)


def run(argv, stdout, stderr, env, trainer, description, check, train, events=Events):
    """The command of a trainer of the package: --spec SPEC, read and
    checked (check(spec)) before train(spec, ev, stop, env); every way it
    ends becomes its event and exit code. events makes the event stream
    (Events, or one with another trainer's model version)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    ap = argparse.ArgumentParser(prog=trainer, description=description)
    ap.add_argument("--spec", required=True, help="the run's spec.json")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_BAD_SPEC if e.code else EXIT_FINISHED
    ev = events(stdout)
    stop = Stop()
    stop.install()
    try:
        spec = read_spec(args.spec, trainer)
        check(spec)
        train(spec, ev, stop, env)
        return EXIT_FINISHED
    except Cancelled:
        ev.status("cancelled", "stopped on request")
        return EXIT_CANCELLED
    except TrainerError as e:
        detail = getattr(e, "detail", "")
        if detail:
            ev.log("error", detail)
            stderr.write("%s: %s\n" % (trainer, detail))
        ev.error(e.code, e.message, e.hint)
        stderr.write("%s: error: %s\n" % (trainer, e.message))
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - every failure becomes an error event
        if is_oom(sys.modules.get("torch"), e):
            msg = "out of memory: %s: lower batch_size or max_length (--param batch_size=N, --param max_length=N)" % e
            ev.error("out_of_memory", msg)
            stderr.write("%s: error: %s\n" % (trainer, msg))
            return EXIT_OUT_OF_MEMORY
        ev.error("fit_failed", "%s: %s" % (type(e).__name__, e))
        import traceback
        traceback.print_exc(file=stderr)
        return EXIT_UNEXPECTED
