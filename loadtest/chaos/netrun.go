package chaos

import "context"

// metricVictimLeasesLost is the Run.Metrics key of the leases the victim
// instance's lock backend saw lost during a namespaced run: the lost
// signal a partitioned holder must get.
const metricVictimLeasesLost = metricLockLeasesL + `{instance="victim"}`

// victimLeasesLost is how many leases the victim's backend has seen lost
// since the run started.
func (e *chaosEnv) victimLeasesLost(ctx context.Context) (float64, error) {
	m, err := scrapeCounters(ctx, e.client, e.ins[e.victim()].baseURL(), []string{metricLockLeasesL})
	if err != nil {
		return 0, err
	}
	return m[metricLockLeasesL] - e.victimLost, nil
}
