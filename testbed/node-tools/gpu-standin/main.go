// Command gpu-standin is a test-only stand-in for ROCm's GPU DRA driver
// (gpu.amd.com), so that the testbed's real scheduler pairs our NICs with
// GPUs and the real kubelet prepares both drivers' claims (use case 1). It
// is built on upstream's k8s.io/dynamic-resource-allocation/kubeletplugin
// helper, as the real driver is, and publishes what the real driver
// publishes (see ../../../../shared/notes/amd-gpu-dra-driver.md, mirrored
// from the real driver's public source as of its releases for Kubernetes
// 1.34-1.37): driver gpu.amd.com, pool = node name, device names
// gpu-<card index>-<render minor>, attributes type, pciAddr, cardIndex,
// renderIndex, deviceID, family, productName, driverVersion,
// partitionProfile and the standard resource.kubernetes.io/pcieRoot and
// pciBusID, capacities memory, computeUnits, simdUnits.
//
// Unlike the real driver it reads its GPUs from --sysfs-root (the node's
// made-up sysfs tree: PCI functions of vendor 0x1002 and a display or
// processing-accelerator class), and a prepared claim gets environment
// variables (AMD_GPU_DEVICES, AMD_GPU_PCI_ADDRESSES) instead of /dev/kfd
// and /dev/dri nodes, which a made-up node does not have. Glue only.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const driverName = "gpu.amd.com"

func main() {
	sysfs := flag.String("sysfs-root", "/sys", "the node's sysfs tree")
	node := flag.String("node-name", "", "the node (also the pool)")
	kubeconfig := flag.String("kubeconfig", "", "credentials for the API server")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where CDI specs go")
	flag.Parse()
	if *node == "" {
		fail("--node-name is required")
	}
	gpus, err := discover(*sysfs)
	if err != nil {
		fail("%v", err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	driver := &driver{gpus: gpus, cdiDir: *cdiDir}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(*node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(*kubeletDir+"/plugins/"+driverName),
		kubeletplugin.RegistrarDirectoryPath(*kubeletDir+"/plugins_registry"),
	)
	if err != nil {
		fail("start: %v", err)
	}
	defer helper.Stop()
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*node: {Slices: []resourceslice.Slice{{Devices: devices(gpus)}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		fail("publish: %v", err)
	}
	klog.Infof("serving %d GPUs of node %s", len(gpus), *node)
	<-ctx.Done()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gpu-standin: "+format+"\n", args...)
	os.Exit(1)
}
