// Command kubelet-dial calls a node plugin's sockets the way the kubelet
// does, so that tests judge our servers by the real client stack: grpc-go
// and the k8s.io/kubelet API packages of the pinned kubelet release, a
// connection dialled like the kubelet's plugin manager dials
// (grpc.DialContext with the bare socket path, insecure, WithBlock, a unix
// context dialer and no WithAuthority: grpc-go then sends the
// percent-encoded path as :authority). --authority localhost dials like the
// kubelet's DRA client and device manager instead.
//
// One call per run; the answer is printed as one JSON line on stdout, an
// error as one line on stderr with exit status 1.
//
//	kubelet-dial [--authority A] register --socket REG_SOCK
//	kubelet-dial [--authority A] prepare|unprepare --socket DRA_SOCK --api v1|v1beta1 --claim NS/NAME/UID
//	kubelet-dial [--authority A] health --socket DRA_SOCK --api v1|v1alpha1
//	kubelet-dial [--authority A] device-plugin --socket DP_SOCK
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var authority = flag.String("authority", "", "send this :authority (default: none set, as the plugin manager)")

// dial connects exactly as the kubelet's plugin manager does
// (pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go).
func dial(ctx context.Context, socket string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	}
	if *authority != "" {
		opts = append(opts, grpc.WithAuthority(*authority))
	}
	//nolint:staticcheck // DialContext is what the kubelet calls.
	return grpc.DialContext(ctx, socket, opts...)
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kubelet-dial [--authority A] register|prepare|unprepare|health|device-plugin --socket PATH [...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	cmd := flag.NewFlagSet(flag.Arg(0), flag.ExitOnError)
	socket := cmd.String("socket", "", "the socket to dial")
	api := cmd.String("api", "v1", "API version of the DRA or health service")
	claim := cmd.String("claim", "", "NS/NAME/UID of the claim (prepare, unprepare)")
	_ = cmd.Parse(flag.Args()[1:])
	if *socket == "" {
		fail("--socket is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := dial(ctx, *socket)
	if err != nil {
		fail("dial %s: %v", *socket, err)
	}
	defer conn.Close()
	var out any
	switch flag.Arg(0) {
	case "register":
		out, err = register(ctx, conn)
	case "prepare", "unprepare":
		ns, name, uid := splitClaim(*claim)
		out, err = draCall(ctx, conn, flag.Arg(0), *api, ns, name, uid)
	case "health":
		out, err = health(ctx, conn, *api)
	case "device-plugin":
		out, err = devicePlugin(ctx, conn)
	default:
		fail("unknown command %q", flag.Arg(0))
	}
	if err != nil {
		fail("%s on %s: %v", flag.Arg(0), *socket, err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func splitClaim(claim string) (string, string, string) {
	parts := strings.Split(claim, "/")
	if len(parts) != 3 {
		fail("--claim must be NS/NAME/UID, got %q", claim)
	}
	return parts[0], parts[1], parts[2]
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubelet-dial: "+format+"\n", args...)
	os.Exit(1)
}
