package writeback

import "potato-training/lib/bundle"

// writePhase makes the calls of lib/dispatch's writeBack, each reading
// the predictions and the splits it needs itself.
func writePhase(s *Store, bdir, pred string, schemas []bundle.Schema, opt Options) (Report, error) {
	if _, err := Calibrate(bdir, pred, schemas); err != nil {
		return Report{}, err
	}
	if _, err := Score(bdir, pred, schemas); err != nil {
		return Report{}, err
	}
	if _, err := s.Preview(bdir, pred, opt, func(string, string) bool { return false }); err != nil {
		return Report{}, err
	}
	for _, sc := range schemas {
		other, err := s.PublishedRunOf(opt.Project, sc.Name, opt.RunID)
		if err != nil {
			return Report{}, err
		}
		if other != "" {
			labels, err := s.StoredLabels(opt.Project, other, sc)
			if err != nil {
				return Report{}, err
			}
			c, err := CompareOnCommon(bdir, pred, sc, labels)
			if err != nil {
				return Report{}, err
			}
			c.Bootstrap(GateResamples, GateSeed)
		}
		if _, _, err := SplitPredictions(bdir, pred, "val", sc); err != nil {
			return Report{}, err
		}
	}
	if _, err := s.RecordItems(opt.Project, opt.RunID, bdir); err != nil {
		return Report{}, err
	}
	return s.Publish(bdir, pred, opt)
}
