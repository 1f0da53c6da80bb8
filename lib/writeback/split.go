package writeback

import (
	"fmt"

	"potato-training/lib/bundle"
)

// SplitPredictions is, for one schema, the gold labels of the items of a
// split of the bundle (gold: item to label) and the labels the
// predictions give those of them they predict (pred), both in the form
// Score compares (a multilabel label as its names, sorted, joined by
// "|"); when an item has several predictions the last counts. A bundle
// without the split gives none.
func SplitPredictions(bundleDir, predictionsPath, split string, s bundle.Schema) (gold, pred map[string]string, err error) {
	gold, pred = map[string]string{}, map[string]string{}
	path, _, err := splitPath(bundleDir, split)
	if err != nil || path == "" {
		return gold, pred, err
	}
	golds, err := readGold(path, []bundle.Schema{s})
	if err != nil {
		return nil, nil, fmt.Errorf("writeback: %s split: %w", split, err)
	}
	for id, g := range golds[s.Name] {
		gold[id] = normalLabel(s.Kind, g)
	}
	var p predLine
	err = scanLines(predictionsPath, func(line []byte, _ int) error {
		if err := p.parse(line); err != nil {
			return err
		}
		if p.schema == s.Name {
			if _, ok := gold[p.id]; ok {
				pred[p.id] = normalLabel(s.Kind, labelOf(p.raw[2]))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("writeback: %s split: %w", split, err)
	}
	return gold, pred, nil
}
