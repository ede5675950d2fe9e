// The allocation oracle for Kubernetes 1.36: upstream's structured
// allocator from k8s.io/dynamic-resource-allocation v0.36, with 1.36's
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
		Name: "1.36",
		Defaults: oracle.Gates{
			"DRAAdminAccess":               true,
			"DRAPrioritizedList":           true,
			"DRAResourceClaimDeviceStatus": true,
			"DRAConsumableCapacity":        true,
			"DRAPartitionableDevices":      true,
			"DRADeviceTaints":              true,
			"DRADeviceBindingConditions":   true,
			"DRAExtendedResource":          true,
		},
		Features: func(g oracle.Gates) structured.Features {
			return structured.Features{
				AdminAccess:            g["DRAAdminAccess"],
				PrioritizedList:        g["DRAPrioritizedList"],
				PartitionableDevices:   g["DRAPartitionableDevices"],
				DeviceTaints:           g["DRADeviceTaints"],
				DeviceBindingAndStatus: g["DRADeviceBindingConditions"] && g["DRAResourceClaimDeviceStatus"],
				ConsumableCapacity:     g["DRAConsumableCapacity"],
				ListTypeAttributes:     g["DRAListTypeAttributes"],
			}
		},
		CELFeatures: func(g oracle.Gates) cel.Features {
			return cel.Features{
				EnableConsumableCapacity: g["DRAConsumableCapacity"],
				EnableListTypeAttributes: g["DRAListTypeAttributes"],
			}
		},
		NodeFailure: func(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) },
	})
}
