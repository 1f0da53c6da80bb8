package config

// Kind is what a trainer learns for a schema: it follows from Potato's
// annotation_type (FORMATS.md, "Targets per kind").
type Kind string

const (
	KindNominal    Kind = "nominal"    // radio, select: one chosen label
	KindMultilabel Kind = "multilabel" // multiselect: the list of chosen labels
	KindOrdinal    Kind = "ordinal"    // likert: a number on a scale
	KindContinuous Kind = "continuous" // slider, number
	KindSpan       Kind = "span"       // span: a list of spans
	KindOther      Kind = "other"      // text and everything else: not trainable
)

// Kinds are every kind, in the order the tables list them.
var Kinds = []Kind{KindNominal, KindMultilabel, KindOrdinal, KindContinuous, KindSpan, KindOther}

// Types are the annotation types of a kind, as the messages name them:
// "radio, select", "text and the rest".
func (k Kind) Types() string {
	switch k {
	case KindNominal:
		return "radio, select"
	case KindMultilabel:
		return "multiselect"
	case KindOrdinal:
		return "likert"
	case KindContinuous:
		return "slider, number"
	case KindSpan:
		return "span"
	}
	return "text and the rest"
}

// KindOf maps a Potato annotation_type to the kind of target it yields.
func KindOf(annotationType string) Kind {
	switch annotationType {
	case "radio", "select":
		return KindNominal
	case "multiselect":
		return KindMultilabel
	case "likert":
		return KindOrdinal
	case "slider", "number":
		return KindContinuous
	case "span":
		return KindSpan
	}
	return KindOther
}

// Scheme is one entry of a Potato project's annotation_schemes.
type Scheme struct {
	Name           string
	AnnotationType string
	Kind           Kind
	// Labels are the configured label names, in config order (a label given
	// as {name: ...} contributes its name).
	Labels []string
	// SourceField, when set, names the item field the schema annotates
	// instead of the project's text_key.
	SourceField string
	// SizeOnly is a likert scale given by size, without labels: Labels
	// are then its points, "1" to size.
	SizeOnly bool
	Line     int
}

// Classification reports whether a trainer can learn the schema as labels.
func (s Scheme) Classification() bool {
	return s.Kind == KindNominal || s.Kind == KindMultilabel
}
