package upstreamtable

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// Binary is the ainic-dra binary under test ($AINIC_DRA_BIN); the test
// fails when it is not set.
func Binary(t *testing.T) string {
	bin := os.Getenv("AINIC_DRA_BIN")
	if bin == "" {
		t.Fatal("AINIC_DRA_BIN must name the ainic-dra binary")
	}
	return bin
}

// Release is simulate's --kubernetes-version ($AINIC_DRA_RELEASE, set by
// the run script from the pinned module).
func Release(t *testing.T) string {
	release := os.Getenv("AINIC_DRA_RELEASE")
	if release == "" {
		t.Fatal("AINIC_DRA_RELEASE must name the release (the run script sets it)")
	}
	return release
}

// testOf is the test a context of the table belongs to (its logger is
// ktesting's, which knows its test).
func testOf(ctx context.Context) testing.TB {
	if underlier, ok := klog.FromContext(ctx).GetSink().(ktesting.Underlier); ok {
		if t, ok := underlier.GetUnderlying().(testing.TB); ok {
			return t
		}
	}
	return nil
}

// NewSimulator is the simulator for the table's case running under ctx:
// a case named in notForSimulate is skipped with the reason given there
// (Skip does not return); with $AINIC_DRA_KEEP set, the case's objects are
// left in a directory of that name.
func NewSimulator(ctx context.Context, bin, release string, gates map[string]bool,
	state State, classes ClassLister, slices []*resourceapi.ResourceSlice,
	notForSimulate map[string]string,
) *Simulator {
	test := testOf(ctx)
	if test != nil {
		if why, ok := notForSimulate[test.Name()]; ok {
			test.Skip(why)
		}
	}
	simulator := &Simulator{
		Bin:     bin,
		Release: release,
		Gates:   gates,
		State:   state,
		Classes: classes,
		Slices:  slices,
	}
	if keep := os.Getenv("AINIC_DRA_KEEP"); keep != "" && test != nil {
		simulator.Keep = filepath.Join(keep, strings.NewReplacer("/", "__", " ", "_").Replace(test.Name()))
	}
	return simulator
}

// Why a case of a table is not run through simulate (the per-release
// glue's notForSimulate maps case names to these).
const (
	// JSONCannotCarry: an input JSON cannot carry as the Go value.
	JSONCannotCarry = "not for simulate: its input has a quantity (1e21) that apimachinery writes as JSON \"1\", so simulate would read another case"

	// FormatCannotCarry: a result whose quantity format JSON loses.
	FormatCannotCarry = "not for simulate: its result is the quantity 1 in DecimalSI where an input holds 1 in BinarySI, and JSON carries no format, so the glue cannot tell which one simulate meant (the allocator crate's tests check the format)"

	// DuplicateName: input the API server refuses.
	DuplicateName = "not for simulate: two requests or two subrequests of one name, which the API server refuses; ours refuses it as invalid input, upstream allocates"
)
