package writeback

import "potato-training/lib/bundle"

// writePhaseEach makes the calls lib/dispatch's writeBack made before
// ReadRun, each step reading the predictions and the splits it needs
// itself: calibration, score, preview, the gate's comparison and val
// check, the items and the publish.
func writePhaseEach(s *Store, bdir, pred string, schemas []bundle.Schema, opt Options) (Report, error) {
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

// writePhaseOnce makes the same steps as lib/dispatch's writeBack makes
// them now: calibration, then one reading (ReadRun) for the score, the
// preview, the gate and the publish's gates, then the items and the
// publish.
func writePhaseOnce(s *Store, bdir, pred string, schemas []bundle.Schema, opt Options) (Report, error) {
	if _, err := Calibrate(bdir, pred, schemas); err != nil {
		return Report{}, err
	}
	r := ReadRun(bdir, pred, schemas, &opt, func(string, string) bool { return false })
	if !r.ok {
		panic("the reading fell back to each step")
	}
	if _, err := r.Scores(); err != nil {
		return Report{}, err
	}
	if _, err := r.Preview(s); err != nil {
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
			c, err := r.Compare(sc, labels)
			if err != nil {
				return Report{}, err
			}
			c.Bootstrap(GateResamples, GateSeed)
		}
		if _, _, err := r.Split("val", sc); err != nil {
			return Report{}, err
		}
	}
	if _, err := s.RecordItems(opt.Project, opt.RunID, bdir); err != nil {
		return Report{}, err
	}
	return r.Publish(s, opt)
}
