// Command nri-runtime is the runtime side of NRI for the Rust NRI plugin's
// integration tests: upstream's own adaptation package
// (github.com/containerd/nri/pkg/adaptation, the code containerd and
// CRI-O embed), pinned in go.mod, listening on --socket and driven by one
// JSON command per line on stdin. Our plugin speaks mux and ttrpc by hand,
// so this program is the judge of whether it speaks them right. It is glue:
// decoding commands, calling the adaptation and printing one JSON result
// line per command on stdout. Logs go to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"google.golang.org/protobuf/encoding/protojson"
)

// pod is the JSON shape of a pod in commands and in --sync-pods.
type pod struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Netns     string `json:"netns"`
}

func (p *pod) sandbox() *nri.PodSandbox {
	if p == nil {
		return &nri.PodSandbox{}
	}
	s := &nri.PodSandbox{Id: p.ID, Name: p.Name, Uid: p.UID, Namespace: p.Namespace}
	if p.Netns != "" {
		s.Linux = &nri.LinuxPodSandbox{
			Namespaces: []*nri.LinuxNamespace{{Type: "network", Path: p.Netns}},
		}
	}
	return s
}

type command struct {
	Op        string `json:"op"`
	Count     int    `json:"count"`
	TimeoutMs int    `json:"timeoutMs"`
	Pod       *pod   `json:"pod"`
	Container *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"container"`
}

// observer sees what the adaptation exposes of its plugins. It has no
// accessor for them, but it reports the number of active plugins through
// Metrics.UpdatePluginCount, after a plugin has registered, been configured
// and synchronized, and after every event once closed plugins are dropped
// (a plugin that fails fatally, e.g. times out, is closed and the event
// still succeeds, so tests must watch the count). The adaptation reports
// a newly synchronized plugin after releasing its lock, so a plugin that
// dies at that very moment may be counted one event too long. It also
// hears of plugins that fall back to the deprecated StateChange.
type observer struct {
	mu         sync.Mutex
	changed    *sync.Cond
	plugins    int
	deprecated []string
}

func newObserver() *observer {
	o := &observer{}
	o.changed = sync.NewCond(&o.mu)
	return o
}

func (o *observer) RecordPluginInvocation(string, string, error)                               {}
func (o *observer) RecordPluginLatency(string, string, time.Duration)                          {}
func (o *observer) RecordPluginAdjustments(string, string, *nri.ContainerAdjustment, int, int) {}

func (o *observer) UpdatePluginCount(n int) {
	o.mu.Lock()
	o.plugins = n
	o.mu.Unlock()
	o.changed.Broadcast()
}

func (o *observer) PluginWarning(_ context.Context, d nri.Deprecation, plugin, details string) {
	o.mu.Lock()
	o.deprecated = append(o.deprecated, fmt.Sprintf("%s: %s %s", d, plugin, details))
	o.mu.Unlock()
}

// waitPlugins waits until at least n plugins are active. sync.Cond has no
// timeout, so a timer broadcasts once the deadline passes; it takes the
// lock first, so the wakeup cannot fall between our check and Wait.
func (o *observer) waitPlugins(n int, timeout time.Duration) (int, bool) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.changed.Broadcast()
	})
	defer t.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.plugins < n && time.Now().Before(deadline) {
		o.changed.Wait()
	}
	return o.plugins, o.plugins >= n
}

func (o *observer) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.plugins
}

// state returns the plugin count and the deprecations heard since the last
// call (the adaptation warns once per plugin and event).
func (o *observer) state() (int, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.deprecated
	o.deprecated = nil
	return o.plugins, d
}

func main() {
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "nri-runtime:", err)
		os.Exit(2)
	}
}

// running is the set of pod sandboxes the runtime reports to Synchronize:
// running ones with their network namespace, stopped ones without, until
// removed.
type running struct {
	mu   sync.Mutex
	byID map[string]*nri.PodSandbox
}

func (r *running) add(p *nri.PodSandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[p.Id] = p
}

// stopped keeps a stopped sandbox listed without its network namespace,
// as containerd lists NotReady sandboxes until they are removed.
func (r *running) stopped(p *nri.PodSandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[p.Id]; !ok {
		return
	}
	r.byID[p.Id] = &nri.PodSandbox{Id: p.Id, Name: p.Name, Uid: p.Uid, Namespace: p.Namespace}
}

func (r *running) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, id)
}

func (r *running) list() []*nri.PodSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*nri.PodSandbox, 0, len(r.byID))
	for _, p := range r.byID {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// serve runs the adaptation until stdin ends.
func serve() error {
	socket := flag.String("socket", "", "the NRI socket to listen on")
	syncPods := flag.String("sync-pods", "", "JSON list of pods running before any run-pod")
	flag.Parse()
	if *socket == "" {
		return errors.New("--socket is required")
	}
	pods := &running{byID: map[string]*nri.PodSandbox{}}
	if *syncPods != "" {
		buf, err := os.ReadFile(*syncPods)
		if err != nil {
			return err
		}
		var list []*pod
		if err := json.Unmarshal(buf, &list); err != nil {
			return fmt.Errorf("%s: %w", *syncPods, err)
		}
		for _, p := range list {
			pods.add(p.sandbox())
		}
	}

	// Pre-installed plugins would be launched from the plugin directory
	// (default /opt/nri/plugins) with configs from /etc/nri/conf.d; point
	// both at an empty directory of our own so only the plugin under test
	// takes part. External connections stay enabled: that is how it comes.
	empty, err := os.MkdirTemp("", "nri-runtime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(empty)

	obs := newObserver()
	// A plugin that (re)connects learns the sandboxes as from a real
	// runtime: those of --sync-pods and of run-pod, stopped ones without
	// their namespace, removed ones gone.
	syncFn := func(ctx context.Context, cb nri.SyncCB) error {
		_, err := cb(ctx, pods.list(), nil)
		return err
	}
	// Our plugin must never ask for unsolicited container updates.
	updateFn := func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) {
		return nil, errors.New("nri-runtime: UpdateContainers is refused: the plugin must not update containers")
	}
	r, err := nri.New("ainic-testbed-runtime", "v0.0.0", syncFn, updateFn,
		nri.WithSocketPath(*socket),
		nri.WithPluginPath(filepath.Join(empty, "plugins")),
		nri.WithPluginConfigPath(filepath.Join(empty, "conf.d")),
		nri.WithMetrics(obs),
		nri.WithDeprecationRecorder(obs),
	)
	if err != nil {
		return err
	}
	if err := r.Start(); err != nil {
		return err
	}
	defer r.Stop()

	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		res := run(r, obs, pods, in.Bytes())
		line, _ := json.Marshal(res)
		out.Write(append(line, '\n'))
		out.Flush()
	}
	return in.Err()
}

// run carries out one command and returns its result line.
func run(r *nri.Adaptation, obs *observer, pods *running, line []byte) map[string]any {
	var c command
	if err := json.Unmarshal(line, &c); err != nil {
		return map[string]any{"ok": false, "error": "bad command: " + err.Error(), "plugins": obs.count()}
	}
	ctx := context.Background()
	res := map[string]any{}
	var err error
	// timed runs one adaptation call and records its wall time alone, so
	// decoding and printing do not count.
	timed := func(call func() error) error {
		start := time.Now()
		err := call()
		res["micros"] = time.Since(start).Microseconds()
		return err
	}
	switch c.Op {
	case "wait-plugins":
		n, ok := obs.waitPlugins(c.Count, time.Duration(c.TimeoutMs)*time.Millisecond)
		if !ok {
			err = fmt.Errorf("%d of %d plugins after %d ms", n, c.Count, c.TimeoutMs)
		}
	case "run-pod":
		req := &nri.RunPodSandboxRequest{Pod: c.Pod.sandbox()}
		err = timed(func() error { return r.RunPodSandbox(ctx, req) })
		if err == nil {
			pods.add(req.Pod)
		}
	case "stop-pod":
		req := &nri.StopPodSandboxRequest{Pod: c.Pod.sandbox()}
		err = timed(func() error { return r.StopPodSandbox(ctx, req) })
		pods.stopped(req.Pod)
	case "remove-pod":
		req := &nri.RemovePodSandboxRequest{Pod: c.Pod.sandbox()}
		err = timed(func() error { return r.RemovePodSandbox(ctx, req) })
		pods.remove(req.Pod.Id)
	case "create-container":
		ctr := &nri.Container{PodSandboxId: c.Pod.sandbox().Id}
		if c.Container != nil {
			ctr.Id, ctr.Name = c.Container.ID, c.Container.Name
		}
		req := &nri.CreateContainerRequest{Pod: c.Pod.sandbox(), Container: ctr}
		var rpl *nri.CreateContainerResponse
		err = timed(func() (err error) { rpl, err = r.CreateContainer(ctx, req); return err })
		if err == nil {
			// Proto field names, as our prost types spell them.
			adjust, merr := protojson.MarshalOptions{UseProtoNames: true}.Marshal(rpl.GetAdjust())
			if merr != nil {
				err = merr
			} else {
				res["adjust"] = json.RawMessage(adjust)
				res["updates"] = len(rpl.GetUpdate())
			}
		}
	default:
		err = fmt.Errorf("unknown op %q", c.Op)
	}
	plugins, deprecated := obs.state()
	res["plugins"] = plugins
	if len(deprecated) > 0 {
		res["deprecated"] = deprecated
	}
	res["ok"] = err == nil
	if err != nil {
		res["error"] = err.Error()
	}
	return res
}
