// The allocation oracle for Kubernetes 1.35: upstream's structured
// allocator from k8s.io/dynamic-resource-allocation v0.35, with 1.35's
// default gates and its scheduler's mapping of gates to features.
package main

import (
	"errors"

	"github.com/amd/ainic-dra/testbed/oracle"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

func main() {
	oracle.Main(oracle.Release{
		Name: "1.35",
		Defaults: oracle.Gates{
			"DRAAdminAccess":               true,
			"DRAPrioritizedList":           true,
			"DRAResourceClaimDeviceStatus": true,
		},
		Features: func(g oracle.Gates) structured.Features {
			return structured.Features{
				AdminAccess:            g["DRAAdminAccess"],
				PrioritizedList:        g["DRAPrioritizedList"],
				PartitionableDevices:   g["DRAPartitionableDevices"],
				DeviceTaints:           g["DRADeviceTaints"],
				DeviceBindingAndStatus: g["DRADeviceBindingConditions"] && g["DRAResourceClaimDeviceStatus"],
				ConsumableCapacity:     g["DRAConsumableCapacity"],
			}
		},
		CELFeatures: func(g oracle.Gates) cel.Features {
			return cel.Features{EnableConsumableCapacity: g["DRAConsumableCapacity"]}
		},
		NodeFailure: func(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) },
	})
}
