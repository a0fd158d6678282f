package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lock"
)

type ctxKey struct{}

func TestCleanupContextTimeoutIsNotTheCallersDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), ctxKey{}, "v"), time.Minute)
	defer cancel()
	cctx, stop := lock.CleanupContext(ctx, 20*time.Millisecond, time.Second)
	defer stop()
	if cctx.Value(ctxKey{}) != "v" {
		t.Error("the clean-up context lost the caller's values")
	}
	<-cctx.Done()
	err := lock.CleanupEnd(cctx)
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 20ms") {
		t.Errorf("CleanupEnd = %v, want its own timeout, not a deadline a caller would take for its own", err)
	}
	if ctx.Err() != nil {
		t.Error("the caller's context ended with the clean-up's")
	}
}

func TestCleanupContextOutlivesTheCallerByGrace(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	const grace = 50 * time.Millisecond
	cctx, stop := lock.CleanupContext(ctx, time.Minute, grace)
	defer stop()
	start := time.Now()
	cancel(errors.New("the caller's own reason"))
	select {
	case <-cctx.Done():
		t.Fatal("the clean-up context ended with its caller's, not a grace later")
	case <-time.After(grace / 2):
	}
	<-cctx.Done()
	if took := time.Since(start); took < grace || took > grace+time.Second {
		t.Errorf("ended %v after the caller's, want about %v", took, grace)
	}
	if err := lock.CleanupEnd(cctx); !strings.Contains(err.Error(), "of the caller's end") {
		t.Errorf("CleanupEnd = %v, want the grace's end", err)
	}
}

func TestCleanupEndOfACallersContext(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("lease lost"))
	if err := lock.CleanupEnd(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("CleanupEnd = %v, want context.Canceled: a caller's cause is no reason the clean-up was not waited for", err)
	}
}

func TestCleanupContextStoppedBeforeTheCallerEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cctx, stop := lock.CleanupContext(ctx, time.Minute, 10*time.Millisecond)
	stop()
	cancel()
	<-cctx.Done()
	if err := lock.CleanupEnd(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("CleanupEnd after stop = %v, want context.Canceled", err)
	}
}
