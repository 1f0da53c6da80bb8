// Package faults is the fault suite that scripts/test-faults runs: each
// test injects one fault that users meet at 3 a.m. into a real run (a
// kill -9, a restarted server, a cut link, a scheduler that ends the job,
// a full disk, a locked store) and asserts what must survive it:
//
//   - no prediction that was produced is lost: it is in Potato's store,
//     or in the run's predictions.jsonl, which potato-dispatch writeback
//     applies later;
//   - run.json, Potato's store and the page (potato-server's API) agree on
//     the run's final state;
//   - the next run starts, and succeeds.
//
// A fault strikes a fit that lasts until it is stopped or released
// (testproject.Endless), never a number of epochs taken for a duration,
// and each test waits for what it needs, never for a time: the suite
// gives the same answers on a fast machine and on a loaded one.
//
// The suite is built only with the faults tag, so that make test does not
// run it twice; scripts/test-faults prints its table: fault, expected,
// seen.
package faults
