package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	healthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	healthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// register is the plugin watcher's handshake: GetInfo, then
// NotifyRegistrationStatus with the outcome.
func register(ctx context.Context, conn *grpc.ClientConn) (any, error) {
	client := registerapi.NewRegistrationClient(conn)
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo: %w", err)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: true}
	if _, err := client.NotifyRegistrationStatus(ctx, status); err != nil {
		return nil, fmt.Errorf("NotifyRegistrationStatus: %w", err)
	}
	return info, nil
}

// draCall prepares or unprepares one claim through the DRAPlugin service of
// the given version.
func draCall(ctx context.Context, conn *grpc.ClientConn, op, api, ns, name, uid string) (any, error) {
	switch api {
	case "v1":
		client := drav1.NewDRAPluginClient(conn)
		claims := []*drav1.Claim{{Namespace: ns, Name: name, Uid: uid}}
		if op == "prepare" {
			return client.NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{Claims: claims})
		}
		return client.NodeUnprepareResources(ctx, &drav1.NodeUnprepareResourcesRequest{Claims: claims})
	case "v1beta1":
		client := drav1beta1.NewDRAPluginClient(conn)
		claims := []*drav1beta1.Claim{{Namespace: ns, Name: name, Uid: uid}}
		if op == "prepare" {
			return client.NodePrepareResources(ctx, &drav1beta1.NodePrepareResourcesRequest{Claims: claims})
		}
		return client.NodeUnprepareResources(ctx, &drav1beta1.NodeUnprepareResourcesRequest{Claims: claims})
	}
	return nil, fmt.Errorf("unknown DRA API %q (v1 or v1beta1)", api)
}

// health opens the NodeWatchResources stream and returns its first message.
func health(ctx context.Context, conn *grpc.ClientConn, api string) (any, error) {
	switch api {
	case "v1":
		stream, err := healthv1.NewDRAResourceHealthClient(conn).
			NodeWatchResources(ctx, &healthv1.NodeWatchResourcesRequest{})
		if err != nil {
			return nil, err
		}
		return stream.Recv()
	case "v1alpha1":
		stream, err := healthv1alpha1.NewDRAResourceHealthClient(conn).
			NodeWatchResources(ctx, &healthv1alpha1.NodeWatchResourcesRequest{})
		if err != nil {
			return nil, err
		}
		return stream.Recv()
	}
	return nil, fmt.Errorf("unknown health API %q (v1 or v1alpha1)", api)
}

// devicePluginAnswers is what the device manager learns from a plugin.
type devicePluginAnswers struct {
	Options   *pluginapi.DevicePluginOptions         `json:"options"`
	Devices   []*pluginapi.Device                    `json:"devices"`
	Preferred *pluginapi.PreferredAllocationResponse `json:"preferred,omitempty"`
	Allocate  *pluginapi.AllocateResponse            `json:"allocate"`
}

// devicePlugin makes the device manager's calls: options, the first
// ListAndWatch answer, a preferred allocation of one device where the plugin
// offers one, and Allocate of the first device.
func devicePlugin(ctx context.Context, conn *grpc.ClientConn) (any, error) {
	client := pluginapi.NewDevicePluginClient(conn)
	var out devicePluginAnswers
	var err error
	if out.Options, err = client.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		return nil, fmt.Errorf("GetDevicePluginOptions: %w", err)
	}
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	out.Devices = first.Devices
	if len(out.Devices) == 0 {
		return nil, fmt.Errorf("ListAndWatch listed no device")
	}
	var ids []string
	for _, d := range out.Devices {
		ids = append(ids, d.ID)
	}
	if out.Options.GetPreferredAllocationAvailable {
		req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: ids, AllocationSize: 1},
		}}
		if out.Preferred, err = client.GetPreferredAllocation(ctx, req); err != nil {
			return nil, fmt.Errorf("GetPreferredAllocation: %w", err)
		}
	}
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids[:1]}}}
	if out.Allocate, err = client.Allocate(ctx, req); err != nil {
		return nil, fmt.Errorf("Allocate: %w", err)
	}
	return out, nil
}
