// Package upstreamtable lets upstream's allocator test table
// (k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting)
// judge `ainic-dra simulate`. It is glue: a Simulator takes what the table
// hands an allocator (features as gates, the allocated state, classes,
// slices, then a node and the claims), writes them as the objects
// simulate reads, runs the binary and turns its answer back into
// allocation results or an error.
//
// The table's package is internal, so the run script adds a release's
// simulate_test.go.in (testbed/upstream-table-1.3x, which pins that
// release) to a copy of upstream's module (experimental package), where
// it calls the table with a factory built on this package. This package
// builds against every release 1.34 to 1.37: it may not import the
// structured package (which imports the experimental package the table
// runs in), so the allocated state comes in plain terms (State).
package upstreamtable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// ClassLister lists DeviceClasses (the table's DeviceClassLister).
type ClassLister interface {
	List() ([]*resourceapi.DeviceClass, error)
}

// Simulator answers the way an allocator does, by running simulate.
type Simulator struct {
	// Bin is the ainic-dra binary.
	Bin string
	// Release is simulate's --kubernetes-version.
	Release string
	// Gates are given to simulate as --feature-gates.
	Gates map[string]bool
	// State is what claims already allocated hold.
	State State
	// Classes and Slices are the cluster's objects.
	Classes ClassLister
	Slices  []*resourceapi.ResourceSlice
	// Keep, when not empty, is a directory where each run's objects are
	// left (for reading a failing case).
	Keep string
}

// heldRequest names the request of the results that stand for the
// allocated state.
const heldRequest = "held"

// Allocate allocates claims together on node: simulate's exit 0 gives the
// results, exit 3 nothing (upstream's nil, nil: cannot allocate here)
// except for upstream's one error of that kind, and exit 2 an error with
// simulate's message.
func (s *Simulator) Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	objects, err := s.objects(node, claims)
	if err != nil {
		return nil, err
	}
	dir := s.Keep
	if dir == "" {
		dir, err = os.MkdirTemp("", "upstream-table-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(dir) }()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "objects.json")
	if err := os.WriteFile(file, objects, 0o644); err != nil {
		return nil, err
	}
	// A case without a node (the table's "empty" one) allocates on a node
	// no slice names.
	nodeName := "no-node"
	if node != nil {
		nodeName = node.Name
	}
	args := []string{"simulate", "--kubernetes-version", s.Release,
		"--feature-gates", s.gates(), "--node", nodeName, "-f", file, "-o", "json"}
	cmd := exec.CommandContext(ctx, s.Bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		// Interrupted (the process is killed, or never started).
		return nil, fmt.Errorf("simulate: %w", ctx.Err())
	}
	message := strings.TrimSpace(stderr.String())
	var exit *exec.ExitError
	switch {
	case err == nil:
		return results(stdout.Bytes(), len(claims), s.quantities(claims))
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		// Upstream fails a node with an error (ErrFailedAllocationOnNode)
		// only when it meets invalid pools; otherwise with no result.
		if strings.Contains(message, "invalid resource pools were encountered") {
			return nil, errors.New(message)
		}
		return nil, nil
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		return nil, errors.New(message)
	default:
		return nil, fmt.Errorf("simulate %s failed: %v: %s", strings.Join(args, " "), err, message)
	}
}

func (s *Simulator) gates() string {
	var entries []string
	for name, on := range s.Gates {
		entries = append(entries, fmt.Sprintf("%s=%t", name, on))
	}
	sort.Strings(entries)
	return strings.Join(entries, ",")
}

// objects is the List simulate reads: the node, the classes, the slices,
// one claim holding the allocated state and the claims to allocate.
func (s *Simulator) objects(node *v1.Node, claims []*resourceapi.ResourceClaim) ([]byte, error) {
	var items []any
	add := func(kind, apiVersion string, object any) error {
		raw, err := json.Marshal(object)
		if err != nil {
			return err
		}
		// Numbers as written (an int64 is not a float64).
		decoder := json.NewDecoder(bytes.NewReader(raw))
		decoder.UseNumber()
		var fields map[string]any
		if err := decoder.Decode(&fields); err != nil {
			return err
		}
		fields["kind"], fields["apiVersion"] = kind, apiVersion
		items = append(items, fields)
		return nil
	}
	if node != nil {
		if err := add("Node", "v1", node); err != nil {
			return nil, err
		}
	}
	if s.Classes != nil {
		classes, err := s.Classes.List()
		if err != nil {
			return nil, err
		}
		for _, class := range classes {
			if err := add("DeviceClass", "resource.k8s.io/v1", class); err != nil {
				return nil, err
			}
		}
	}
	for _, slice := range s.Slices {
		if err := add("ResourceSlice", "resource.k8s.io/v1", slice); err != nil {
			return nil, err
		}
	}
	if held := s.held(); held != nil {
		if err := add("ResourceClaim", "resource.k8s.io/v1", held); err != nil {
			return nil, err
		}
	}
	for _, claim := range claims {
		if err := add("ResourceClaim", "resource.k8s.io/v1", claim); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
}

// DeviceID names a device (upstream's DeviceID, as strings).
type DeviceID struct{ Driver, Pool, Device string }

func (id DeviceID) String() string { return id.Driver + "/" + id.Pool + "/" + id.Device }

// Share is a share of a device held by an allocated claim.
type Share struct {
	DeviceID
	ShareID string
}

// State is the table's allocated state (upstream's AllocatedState) in
// plain terms: devices held whole, shares held, and the capacity consumed
// on each device, summed over its shares.
type State struct {
	Devices  []DeviceID
	Shares   []Share
	Capacity map[DeviceID]map[resourceapi.QualifiedName]resource.Quantity
}

// held is a claim whose allocation holds what the state says, the way
// kube-scheduler gathers the state from allocated claims: a result
// without a share holds its device; a result with a share holds that
// share and, for the first share of a device, the device's aggregated
// consumed capacity (a device with capacity but no share gets a share of
// its own).
func (s *Simulator) held() *resourceapi.ResourceClaim {
	var out []resourceapi.DeviceRequestAllocationResult
	result := func(id DeviceID) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: heldRequest,
			Driver: id.Driver, Pool: id.Pool, Device: id.Device}
	}
	for _, id := range sortedIDs(s.State.Devices) {
		out = append(out, result(id))
	}
	capacityGiven := map[DeviceID]bool{}
	shares := append([]Share(nil), s.State.Shares...)
	key := func(share Share) string {
		if share.ShareID == "" {
			return share.DeviceID.String()
		}
		return share.DeviceID.String() + "/" + share.ShareID
	}
	sort.Slice(shares, func(i, j int) bool { return key(shares[i]) < key(shares[j]) })
	for _, share := range shares {
		r := result(share.DeviceID)
		uid := types.UID(share.ShareID)
		r.ShareID = &uid
		if consumed, ok := s.State.Capacity[share.DeviceID]; ok && !capacityGiven[share.DeviceID] {
			r.ConsumedCapacity = copied(consumed)
			capacityGiven[share.DeviceID] = true
		}
		out = append(out, r)
	}
	var rest []DeviceID
	for id := range s.State.Capacity {
		if !capacityGiven[id] {
			rest = append(rest, id)
		}
	}
	for n, id := range sortedIDs(rest) {
		r := result(id)
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", n+1))
		r.ShareID = &uid
		r.ConsumedCapacity = copied(s.State.Capacity[id])
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil
	}
	claim := &resourceapi.ResourceClaim{}
	claim.Name = "allocated-state"
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: heldRequest,
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "allocated-state"}}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: out}}
	return claim
}

func sortedIDs(ids []DeviceID) []DeviceID {
	ids = append([]DeviceID(nil), ids...)
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids
}

func copied(consumed map[resourceapi.QualifiedName]resource.Quantity) map[resourceapi.QualifiedName]resource.Quantity {
	out := make(map[resourceapi.QualifiedName]resource.Quantity, len(consumed))
	for name, q := range consumed {
		out[name] = q.DeepCopy()
	}
	return out
}

// quantities are the case's quantities that an allocation result may
// repeat, the claims' requests first: those of the claims, of the
// devices' capacities and their request policies, and of the allocated
// state.
func (s *Simulator) quantities(claims []*resourceapi.ResourceClaim) []resource.Quantity {
	var out []resource.Quantity
	add := func(qs ...*resource.Quantity) {
		for _, q := range qs {
			if q != nil {
				out = append(out, *q)
			}
		}
	}
	requirements := func(c *resourceapi.CapacityRequirements) {
		if c != nil {
			for _, q := range c.Requests {
				add(&q)
			}
		}
	}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil {
				requirements(request.Exactly.Capacity)
			}
			for _, sub := range request.FirstAvailable {
				requirements(sub.Capacity)
			}
		}
	}
	for _, slice := range s.Slices {
		for _, device := range slice.Spec.Devices {
			for _, capacity := range device.Capacity {
				if policy := capacity.RequestPolicy; policy != nil {
					add(policy.Default)
					for i := range policy.ValidValues {
						add(&policy.ValidValues[i])
					}
					if r := policy.ValidRange; r != nil {
						add(r.Min, r.Max, r.Step)
					}
				}
			}
			for _, capacity := range device.Capacity {
				add(&capacity.Value)
			}
		}
	}
	for _, consumed := range s.State.Capacity {
		for _, q := range consumed {
			add(&q)
		}
	}
	return out
}

// asKnown is q as a Go value: JSON carries a quantity's value and string
// form, not its in-memory format and cache, so the first known quantity
// equal to it in both stands for it. A value no input has is one the
// allocator computed (a request rounded up to a step), which upstream
// builds with NewQuantity or NewMilliQuantity: so is this one.
func asKnown(q resource.Quantity, known []resource.Quantity) resource.Quantity {
	text := q.String()
	for _, k := range known {
		// String caches its answer in the quantity: ask a copy.
		probe := k.DeepCopy()
		if k.Cmp(q) == 0 && probe.String() == text {
			return k.DeepCopy()
		}
	}
	if milli := q.MilliValue(); milli%1000 != 0 {
		return *resource.NewMilliQuantity(milli, q.Format)
	}
	return *resource.NewQuantity(q.Value(), q.Format)
}

// results reads simulate's JSON list of claims: their allocations, in
// the claims' order. The JSON form is normalised where it cannot hold
// what a Go value does: opaque parameters compacted (simulate prints
// them indented), empty lists as nil.
func results(out []byte, claims int, known []resource.Quantity) ([]resourceapi.AllocationResult, error) {
	var allocated []resourceapi.ResourceClaim
	if err := json.Unmarshal(out, &allocated); err != nil {
		return nil, fmt.Errorf("simulate's output: %w: %s", err, out)
	}
	if len(allocated) != claims {
		return nil, fmt.Errorf("simulate allocated %d claims, not %d", len(allocated), claims)
	}
	results := make([]resourceapi.AllocationResult, 0, claims)
	for _, claim := range allocated {
		if claim.Status.Allocation == nil {
			return nil, fmt.Errorf("simulate printed claim %s without an allocation", claim.Name)
		}
		result := *claim.Status.Allocation
		for i := range result.Devices.Config {
			if opaque := result.Devices.Config[i].Opaque; opaque != nil && len(opaque.Parameters.Raw) > 0 {
				var compact bytes.Buffer
				if err := json.Compact(&compact, opaque.Parameters.Raw); err == nil {
					opaque.Parameters.Raw = compact.Bytes()
				}
			}
		}
		if len(result.Devices.Config) == 0 {
			result.Devices.Config = nil
		}
		for i := range result.Devices.Results {
			for name, q := range result.Devices.Results[i].ConsumedCapacity {
				result.Devices.Results[i].ConsumedCapacity[name] = asKnown(q, known)
			}
		}
		results = append(results, result)
	}
	return results, nil
}
