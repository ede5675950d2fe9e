package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// cdiKind is the real driver's CDI kind.
const cdiKind = "k8s.gpu.amd.com/gpu"

type driver struct {
	gpus   []gpu
	cdiDir string
}

func (d *driver) byName(name string) (gpu, bool) {
	for _, g := range d.gpus {
		if g.name == name {
			return g, true
		}
	}
	return gpu{}, false
}

// PrepareResourceClaims writes one CDI spec per claim naming its GPUs.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
	}
	return out, nil
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	var result kubeletplugin.PrepareResult
	var names, addrs []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		g, ok := d.byName(r.Device)
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("no GPU %s on this node", r.Device)}
		}
		names = append(names, g.name)
		addrs = append(addrs, g.pciAddr)
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: []string{fmt.Sprintf("%s=%s-%s", cdiKind, claim.UID, g.name)},
		})
	}
	if err := d.writeSpec(claim.UID, names, addrs); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	return result
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("k8s.gpu.amd.com-%s.json", uid))
}

func (d *driver) writeSpec(uid types.UID, names, addrs []string) error {
	env := []string{
		"AMD_GPU_DEVICES=" + strings.Join(names, ","),
		"AMD_GPU_PCI_ADDRESSES=" + strings.Join(addrs, ","),
	}
	var devices []map[string]any
	for _, n := range names {
		devices = append(devices, map[string]any{
			"name":           fmt.Sprintf("%s-%s", uid, n),
			"containerEdits": map[string]any{"env": env},
		})
	}
	// 0.5.0 and later take device names that start with a digit (a UID).
	spec := map[string]any{"cdiVersion": "0.6.0", "kind": cdiKind, "devices": devices}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := d.specPath(uid) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	return os.Rename(tmp, d.specPath(uid))
}

// UnprepareResourceClaims removes the claims' CDI specs.
func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if os.IsNotExist(err) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	klog.Errorf("%s: %v", msg, err)
}

func (d *driver) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}
