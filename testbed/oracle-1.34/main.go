// The allocation oracle for Kubernetes 1.34: upstream's structured
// allocator from k8s.io/dynamic-resource-allocation v0.34, with 1.34's
// default gates and its scheduler's mapping of gates to features.
package main

import (
	"github.com/amd/ainic-dra/testbed/oracle"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

func main() {
	oracle.Main(oracle.Release{
		Name: "1.34",
		Defaults: oracle.Gates{
			"DRAAdminAccess":               true,
			"DRAPrioritizedList":           true,
			"DRAResourceClaimDeviceStatus": true,
		},
		Features: func(g oracle.Gates) structured.Features {
			return structured.Features{
				AdminAccess:          g["DRAAdminAccess"],
				PrioritizedList:      g["DRAPrioritizedList"],
				PartitionableDevices: g["DRAPartitionableDevices"],
				DeviceTaints:         g["DRADeviceTaints"],
				DeviceBinding:        g["DRADeviceBindingConditions"],
				DeviceStatus:         g["DRAResourceClaimDeviceStatus"],
				ConsumableCapacity:   g["DRAConsumableCapacity"],
			}
		},
		CELFeatures: func(g oracle.Gates) cel.Features {
			return cel.Features{EnableConsumableCapacity: g["DRAConsumableCapacity"]}
		},
	})
}
