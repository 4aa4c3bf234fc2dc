package engine

import (
	"errors"
	"fmt"

	"rlhfstation/engine/backend/cuda"
)

// SelectDevice applies the device policy (DESIGN §10) to a --device value. cpu computes on
// the CPU. cuda needs a CUDA device of compute capability 8.0 or newer with NVRTC and cuBLAS:
// otherwise it is refused (a *ConfigError, exit 2) with the reason — no libcuda, cuInit
// failing (100: no device), capability too low, NVRTC or cuBLAS not found with the places
// searched. auto takes CUDA when cuda would be accepted, else the CPU, with a note saying why.
// This build runs the model on the CPU only: a usable CUDA device is reported and refused
// until the CUDA backend runs the model. An unknown name is a *ConfigError.
func SelectDevice(name string) (device, note string, err error) {
	switch name {
	case "cpu":
		return "cpu", "", nil
	case "auto":
		info, err := cuda.Probe()
		if err != nil {
			return "cpu", "device auto: using the CPU: " + briefReason(err), nil
		}
		return "cpu", fmt.Sprintf("device auto: using the CPU: found %s, but this build cannot run the model on it yet", info.Name), nil
	case "cuda":
		info, err := cuda.Probe()
		if err != nil {
			return "", "", &ConfigError{fmt.Errorf("--device cuda: %w", err)}
		}
		return "", "", &ConfigError{fmt.Errorf("--device cuda: found %s, but this build cannot run the model on it yet; use --device cpu", info)}
	}
	return "", "", &ConfigError{fmt.Errorf("--device must be auto, cpu or cuda (got %q)", name)}
}

// briefReason is the one-line form of why CUDA is unusable, for auto's note.
func briefReason(err error) string {
	var ue *cuda.UnavailableError
	if errors.As(err, &ue) && ue.Brief != "" {
		return ue.Brief
	}
	return err.Error()
}
