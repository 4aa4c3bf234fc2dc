package backend

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// An Opener opens a device's backend, or says why it cannot.
type Opener func() (Backend, error)

var (
	regMu    sync.Mutex
	registry = map[string]Opener{}
)

// Register makes a device known to Select under name. Backend packages call it from their
// init, so that this package imports none of them: a device exists when its package is
// linked in (engine imports the ones it ships).
func Register(name string, open Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("backend: device " + name + " registered twice")
	}
	registry[name] = open
}

// Devices lists the registered device names, sorted.
func Devices() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Select opens the backend of a device: "cpu", another registered name ("cuda"), or "auto":
// the first registered device other than the CPU that opens, else the CPU.
func Select(device string) (Backend, error) {
	regMu.Lock()
	open, ok := registry[device]
	regMu.Unlock()
	if device == "auto" {
		for _, name := range Devices() {
			if name == "cpu" {
				continue
			}
			if b, err := Select(name); err == nil {
				return b, nil
			}
		}
		return Select("cpu")
	}
	if !ok {
		return nil, fmt.Errorf("device %q is not one of auto, %s", device, strings.Join(Devices(), ", "))
	}
	b, err := open()
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", device, err)
	}
	return b, nil
}

// Reference opens the reference backend, the CPU: for code that was given no device (a
// model loaded by a test, a merge of host tensors).
func Reference() (Backend, error) { return Select("cpu") }
