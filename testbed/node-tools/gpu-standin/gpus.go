package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// gpu is one AMD GPU PCI function found in the sysfs tree.
type gpu struct {
	name      string // gpu-<card>-<render minor>
	pciAddr   string // 0000:08:00.0
	pcieRoot  string // pci0000:00
	deviceID  string // 0x74a1
	card      int64
	renderMin int64
}

// discover lists the AMD GPUs below sysfs/bus/pci/devices, in PCI address
// order; card indexes follow that order, render minors start at 128, as
// the amdgpu driver numbers them at boot.
func discover(sysfs string) ([]gpu, error) {
	dir := filepath.Join(sysfs, "bus/pci/devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var addrs []string
	for _, e := range entries {
		fn := filepath.Join(dir, e.Name())
		class := read(fn, "class")
		// Display controller (0x03xxxx) or processing accelerator (0x1200xx).
		if read(fn, "vendor") == "0x1002" && (strings.HasPrefix(class, "0x03") || strings.HasPrefix(class, "0x12")) {
			addrs = append(addrs, e.Name())
		}
	}
	sort.Strings(addrs)
	var gpus []gpu
	for i, addr := range addrs {
		fn := filepath.Join(dir, addr)
		resolved, err := filepath.EvalSymlinks(fn)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", fn, err)
		}
		rel, err := filepath.Rel(filepath.Join(sysfs, "devices"), resolved)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, gpu{
			name:      fmt.Sprintf("gpu-%d-%d", i, 128+i),
			pciAddr:   strings.ToLower(addr),
			pcieRoot:  strings.SplitN(rel, "/", 2)[0],
			deviceID:  read(fn, "device"),
			card:      int64(i),
			renderMin: int64(128 + i),
		})
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("no AMD GPU below %s", dir)
	}
	return gpus, nil
}

func read(dir, file string) string {
	b, _ := os.ReadFile(filepath.Join(dir, file))
	return strings.TrimSpace(string(b))
}

// devices is what the real driver publishes for each GPU.
func devices(gpus []gpu) []resourceapi.Device {
	var out []resourceapi.Device
	for _, g := range gpus {
		str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
		num := func(n int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: ptr.To(n)} }
		out = append(out, resourceapi.Device{
			Name: g.name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":                            str("amdgpu"),
				"pciAddr":                         str(g.pciAddr),
				"cardIndex":                       num(g.card),
				"renderIndex":                     num(g.renderMin),
				"deviceID":                        str(g.deviceID),
				"family":                          str("AI"),
				"productName":                     str("AMD Instinct MI300X"),
				"driverVersion":                   {VersionValue: ptr.To("6.12.12")},
				"partitionProfile":                str("spx_nps1"),
				"resource.kubernetes.io/pcieRoot": str(g.pcieRoot),
				"resource.kubernetes.io/pciBusID": str(g.pciAddr),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory":       {Value: resource.MustParse("192Gi")},
				"computeUnits": {Value: resource.MustParse("304")},
				"simdUnits":    {Value: resource.MustParse("1216")},
			},
		})
	}
	return out
}
