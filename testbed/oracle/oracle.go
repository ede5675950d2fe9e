// Package oracle runs upstream's structured allocator
// (k8s.io/dynamic-resource-allocation/structured) on the inputs
// `ainic-dra simulate` reads and answers in the same shape, so the two can
// be compared case by case. It is glue: decoding objects, gathering the
// allocated state the way kube-scheduler's DynamicResources plugin does,
// and printing. The per-release programs (testbed/oracle-1.3x) pin the
// library's version and map feature gates to that release's Features.
package oracle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"sigs.k8s.io/yaml"
)

// Gates are feature gates by upstream name.
type Gates map[string]bool

// Release adapts the program to one release of the library.
type Release struct {
	// Name is the release, e.g. "1.37".
	Name string
	// Defaults are the release's default gates.
	Defaults Gates
	// Features maps gates to the allocator's features the way that
	// release's scheduler does.
	Features func(Gates) structured.Features
	// CELFeatures maps gates to the CEL environment's features.
	CELFeatures func(Gates) cel.Features
	// NodeFailure tells an error that fails only this node (cannot
	// allocate here) from a fatal one (invalid input); releases before
	// 1.35 have no such errors.
	NodeFailure func(error) bool
}

// Case is one allocation problem: the objects simulate reads, the node
// and the gates.
type Case struct {
	Name    string            `json:"name"`
	Node    string            `json:"node"`
	Gates   Gates             `json:"gates,omitempty"`
	Objects []json.RawMessage `json:"objects"`
	// ShuffleSeed, when not zero, permutes the slices with that seed
	// before allocating: kube-scheduler lists them from an informer cache
	// in map order, and the stable and incubating allocators walk pools
	// and slices in the order they get them. Several seeds show which
	// answers a case can get.
	ShuffleSeed int64 `json:"shuffleSeed,omitempty"`
}

// Answer is the outcome of a case, in simulate's terms: "allocated"
// (Claims carry status.allocation), "unallocatable" (exit 3) or "invalid"
// (exit 2), with a message for the last two.
type Answer struct {
	Name    string                      `json:"name"`
	Outcome string                      `json:"outcome"`
	Message string                      `json:"message,omitempty"`
	Claims  []resourceapi.ResourceClaim `json:"claims,omitempty"`
}

// Main runs the program: with --cases, one Case per line on stdin and one
// Answer per line on stdout; otherwise objects from -f files or
// directories, like simulate, with simulate's exit codes.
func Main(release Release) {
	var files multiFlag
	node := flag.String("node", "", "the node to allocate on")
	gates := flag.String("feature-gates", "", "feature gates, Name=true,...")
	cases := flag.Bool("cases", false, "read JSON cases from stdin, one per line")
	flag.Var(&files, "f", "file or directory of objects (repeatable)")
	flag.Parse()
	if *cases {
		if err := runCases(release, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "oracle: %v\n", err)
			os.Exit(2)
		}
		return
	}
	parsed, err := parseGates(*gates)
	if err != nil {
		fail(2, err)
	}
	c := Case{Node: *node, Gates: parsed}
	for _, f := range files {
		objects, err := readObjects(f)
		if err != nil {
			fail(2, err)
		}
		c.Objects = append(c.Objects, objects...)
	}
	answer := Solve(release, c)
	switch answer.Outcome {
	case "allocated":
		out, _ := json.MarshalIndent(answer.Claims, "", "  ")
		fmt.Println(string(out))
	case "unallocatable":
		fail(3, errors.New(answer.Message))
	default:
		fail(2, errors.New(answer.Message))
	}
}

func fail(code int, err error) {
	fmt.Fprintf(os.Stderr, "oracle: %v\n", err)
	os.Exit(code)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseGates(s string) (Gates, error) {
	gates := Gates{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, "=")
		if !ok || (value != "true" && value != "false") {
			return nil, fmt.Errorf("invalid feature gate entry %q", entry)
		}
		gates[name] = value == "true"
	}
	return gates, nil
}

func runCases(release Release, in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	encoder := json.NewEncoder(out)
	for scanner.Scan() {
		var c Case
		if err := json.Unmarshal(scanner.Bytes(), &c); err != nil {
			return fmt.Errorf("case line: %w", err)
		}
		if err := encoder.Encode(Solve(release, c)); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// readObjects reads YAML or JSON documents (and List items) from a file or
// the *.yaml, *.yml, *.json files of a directory.
func readObjects(path string) ([]json.RawMessage, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var paths []string
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if ext == ".yaml" || ext == ".yml" || ext == ".json" {
				paths = append(paths, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(paths)
	} else {
		paths = []string{path}
	}
	var out []json.RawMessage
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split("\n"+string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			raw, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			out = append(out, expandList(raw)...)
		}
	}
	return out, nil
}

func expandList(raw json.RawMessage) []json.RawMessage {
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal(raw, &list) == nil && strings.HasSuffix(list.Kind, "List") {
		return list.Items
	}
	if string(raw) == "null" {
		return nil
	}
	return []json.RawMessage{raw}
}

// classes lists DeviceClasses the way the allocator asks for them.
type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, class := range c {
		out = append(out, class)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := c[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

// inputs are a case's objects, decoded.
type inputs struct {
	node    *v1.Node
	classes classes
	slices  []*resourceapi.ResourceSlice
	held    []*resourceapi.ResourceClaim
	pending []*resourceapi.ResourceClaim
}

func decode(c Case) (*inputs, error) {
	in := &inputs{classes: classes{}}
	for _, raw := range c.Objects {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
		switch meta.Kind {
		case "Node":
			var node v1.Node
			if err := json.Unmarshal(raw, &node); err != nil {
				return nil, err
			}
			if node.Name == c.Node {
				in.node = &node
			}
		case "DeviceClass":
			var class resourceapi.DeviceClass
			if err := json.Unmarshal(raw, &class); err != nil {
				return nil, err
			}
			in.classes[class.Name] = &class
		case "ResourceSlice":
			var slice resourceapi.ResourceSlice
			if err := json.Unmarshal(raw, &slice); err != nil {
				return nil, err
			}
			in.slices = append(in.slices, &slice)
		case "ResourceClaim":
			var claim resourceapi.ResourceClaim
			if err := json.Unmarshal(raw, &claim); err != nil {
				return nil, err
			}
			in.add(&claim)
		case "ResourceClaimTemplate":
			var template resourceapi.ResourceClaimTemplate
			if err := json.Unmarshal(raw, &template); err != nil {
				return nil, err
			}
			claim := &resourceapi.ResourceClaim{Spec: template.Spec.Spec}
			claim.Name = template.Name
			claim.Namespace = template.Namespace
			in.add(claim)
		}
	}
	if in.node == nil {
		in.node = &v1.Node{}
		in.node.Name = c.Node
	}
	return in, nil
}

func (in *inputs) add(claim *resourceapi.ResourceClaim) {
	if claim.Status.Allocation != nil {
		in.held = append(in.held, claim)
	} else {
		in.pending = append(in.pending, claim)
	}
}

// allocatedState gathers what held claims hold, as kube-scheduler's
// DynamicResources plugin does: admin-access results hold nothing; with
// consumable capacity, a result with a shareID holds that share and its
// consumed capacity; every other result holds its device.
func allocatedState(held []*resourceapi.ResourceClaim, consumable bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range held {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumable && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// Solve allocates a case's pending claims together on its node. A panic
// of upstream's allocator (it has happened: 1.35's incubating allocator
// dereferences a nil pool for "All" requests over devices with counters)
// is answered as outcome "panic", so the run can go on and count it.
func Solve(release Release, c Case) (answer Answer) {
	answer = Answer{Name: c.Name}
	defer func() {
		if r := recover(); r != nil {
			answer = Answer{Name: c.Name, Outcome: "panic", Message: fmt.Sprint(r)}
		}
	}()
	gates := Gates{}
	for name, on := range release.Defaults {
		gates[name] = on
	}
	for name, on := range c.Gates {
		gates[name] = on
	}
	in, err := decode(c)
	if err != nil {
		answer.Outcome, answer.Message = "invalid", err.Error()
		return answer
	}
	if c.ShuffleSeed != 0 {
		r := rand.New(rand.NewSource(c.ShuffleSeed))
		r.Shuffle(len(in.slices), func(i, j int) { in.slices[i], in.slices[j] = in.slices[j], in.slices[i] })
	}
	features := release.Features(gates)
	state := allocatedState(in.held, features.ConsumableCapacity)
	cache := cel.NewCache(100, release.CELFeatures(gates))
	ctx := context.Background()
	allocator, err := structured.NewAllocator(ctx, features, state, in.classes, in.slices, cache)
	if err != nil {
		answer.Outcome, answer.Message = "invalid", err.Error()
		return answer
	}
	results, err := allocator.Allocate(ctx, in.node, in.pending)
	switch {
	case err != nil && release.NodeFailure != nil && release.NodeFailure(err):
		answer.Outcome, answer.Message = "unallocatable", err.Error()
	case err != nil:
		answer.Outcome, answer.Message = "invalid", err.Error()
	case results == nil && len(in.pending) > 0:
		answer.Outcome, answer.Message = "unallocatable", "cannot allocate all claims"
	default:
		answer.Outcome = "allocated"
		for i, claim := range in.pending {
			out := claim.DeepCopy()
			out.Status.Allocation = &results[i]
			answer.Claims = append(answer.Claims, *out)
		}
	}
	return answer
}
