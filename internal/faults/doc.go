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
// The suite is built only with the faults tag, so that make test does not
// run it twice; scripts/test-faults prints its table: fault, expected,
// seen.
package faults
