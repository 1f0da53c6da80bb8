package writeback

import (
	"reflect"
	"testing"
)

// A payload of label and confidence alone takes jsonscan's way through
// refusal, any other the map's: both refuse what they must.
func TestPayloadRefusals(t *testing.T) {
	s, _ := openTestStore(t)
	rep := publish(t, s, testBundle(t), sentiment("r1", 1),
		`{"instance_id":"v1","schema_name":"sentiment","payload":{"label":"pos","confidence":1.5},"confidence":0.9}`,
		`{"instance_id":"v2","schema_name":"sentiment","payload":{"confidence":0.9},"confidence":0.9}`,
		`{"instance_id":"v3","schema_name":"sentiment","payload":{"label":"pos","Confidence":0.9},"confidence":0.9}`,
		`{"instance_id":"e1","schema_name":"sentiment","payload":{"label":"pos","confidence":0.9,"label":"neg"},"confidence":0.9}`,
		`{"instance_id":"e2","schema_name":"sentiment","payload":{"label":null,"confidence":null},"confidence":0.9}`,
	)
	// e2's null label passes as it did before jsonscan: a nominal label
	// of null names none.
	want := map[string]int{RefusedConfidence: 1, RefusedLabel: 1, RefusedKeys: 1}
	if !reflect.DeepEqual(rep.RefusedBy, want) || rep.NWritten != 2 {
		t.Errorf("refused %v, %d written; want %v and e1, e2 written", rep.RefusedBy, rep.NWritten, want)
	}
}
