package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/loadtest/procs"
	"github.com/stockguard/stockguard/loadtest/tally"
)

// MachineInfo is what a benchmark figure needs next to it to be read.
type MachineInfo struct {
	NProc      int     `json:"nproc"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	CPUModel   string  `json:"cpu_model"`
	MemTotalMB float64 `json:"mem_total_mb"`
	Kernel     string  `json:"kernel"`
	GoVersion  string  `json:"go_version"`
}

// readMachine reads /proc; fields it cannot read stay empty.
func readMachine() MachineInfo {
	m := MachineInfo{NProc: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	m.CPUModel, _ = procs.ReadField("/proc/cpuinfo", "model name")
	if v, err := procs.ReadField("/proc/meminfo", "MemTotal"); err == nil {
		m.MemTotalMB = procs.KBToMB(v)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// loadAvg1 is the 1-minute load average, or -1 where /proc/loadavg is missing.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// LoadSummary is the 1-minute load average sampled through the suite. On a
// 2-core machine shared with other engineers' test runs it is the first
// thing to read next to a throughput figure.
type LoadSummary struct {
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Min     float64 `json:"min"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
}

// loadSampler samples loadAvg1 every interval until stopped.
type loadSampler struct {
	mu     sync.Mutex
	vals   []float64
	cancel context.CancelFunc
	done   chan struct{}
}

func startLoadSampler(interval time.Duration) *loadSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &loadSampler{cancel: cancel, done: make(chan struct{})}
	s.add(loadAvg1())
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.add(loadAvg1())
			}
		}
	}()
	return s
}

func (s *loadSampler) add(v float64) {
	if v < 0 {
		return
	}
	s.mu.Lock()
	s.vals = append(s.vals, v)
	s.mu.Unlock()
}

// stop takes a last sample and summarises.
func (s *loadSampler) stop() LoadSummary {
	s.cancel()
	<-s.done
	s.add(loadAvg1())
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarizeLoad(s.vals)
}

func summarizeLoad(vals []float64) LoadSummary {
	if len(vals) == 0 {
		return LoadSummary{}
	}
	l := LoadSummary{Start: vals[0], End: vals[len(vals)-1], Min: vals[0], Max: vals[0], Samples: len(vals)}
	sum := 0.0
	for _, v := range vals {
		l.Min, l.Max = min(l.Min, v), max(l.Max, v)
		sum += v
	}
	l.Mean = tally.Round(sum/float64(len(vals)), 2)
	return l
}
