// Command pause is the pod sandbox's process in the testbed's local pause
// image (no registry is reachable to pull registry.k8s.io/pause): it
// sleeps until SIGINT or SIGTERM and reaps the zombies it inherits, as the
// upstream pause does. Glue only.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
