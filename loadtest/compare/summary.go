package compare

import (
	"fmt"

	"github.com/stockguard/stockguard/loadtest/report"
	"github.com/stockguard/stockguard/loadtest/run"
)

// SummarizeRun turns a run.Result into the report's view of it. err, if the run
// failed, replaces the verdict.
func SummarizeRun(backend, fencing string, instances int, expectedUnsafe bool, res *run.Result, err error) report.RunSummary {
	s := report.RunSummary{Backend: backend, Fencing: fencing, Instances: instances, ExpectedUnsafe: expectedUnsafe}
	switch {
	case err != nil:
		s.Verdict = report.Verdict{Status: report.StatusError, Text: "ERROR: the run did not complete", Note: err.Error()}
		return s
	case res == nil:
		s.Verdict = report.Verdict{Status: report.StatusError, Text: "ERROR: no result"}
		return s
	}
	s.ThroughputPerS, s.Latency, s.Curve = res.ThroughputPerS, res.LatencyMs, res.LatencyCurve
	s.Orders, s.Units, s.Disagreements = res.Orders, res.Units, res.Verification.DisagreementCount
	if res.Orders.Unsent > 0 {
		s.Incomplete = fmt.Sprintf("Sending stopped at --timeout: %d of %d orders were not sent.", res.Orders.Unsent, res.GeneratorOrders)
	}
	s.Verdict = report.Verdict{Status: report.StatusSafe, Text: res.Verdict}
	if !res.Safe && !res.Damaged() {
		// Inconclusive: nothing found, but not everything could be checked.
		s.Verdict.Status = report.StatusNeutral
		s.Verdict.Note = "Not verified: the receipts may lack the units of orders whose outcome stayed unknown."
		return s
	}
	if !res.Safe {
		s.Verdict.Status = report.StatusUnsafe
		if expectedUnsafe {
			s.Verdict.Status = report.StatusExpectedUnsafe
			s.Verdict.Note = fmt.Sprintf("Expected: %s does not coordinate %d instances.", backend, instances)
		} else {
			s.Verdict.Note = "Not expected: this backend is meant to prevent exactly this."
		}
	} else if expectedUnsafe {
		s.Verdict.Note = "No damage this time; this backend cannot prevent it, so a heavier or more contended workload would show it."
	}
	return s
}
