package engine

import (
	"errors"
	"fmt"
	"os"
)

// SelectDevice applies this build's device policy (DESIGN §10) to a --device value: it
// computes on the CPU; cuda is refused with the reason; auto falls back to the CPU, with a
// note saying why when the machine has an NVIDIA GPU it cannot use. An unknown name is a
// *ConfigError.
func SelectDevice(name string) (device, note string, err error) {
	switch name {
	case "cpu":
		return "cpu", "", nil
	case "auto":
		if _, err := os.Stat("/dev/nvidia0"); err == nil {
			note = "device auto: using the CPU (this build has no CUDA backend yet)"
		}
		return "cpu", note, nil
	case "cuda":
		return "", "", errors.New("--device cuda: this build has no CUDA backend yet; use --device cpu")
	}
	return "", "", &ConfigError{fmt.Errorf("--device must be auto, cpu or cuda (got %q)", name)}
}
