package engine

import (
	"errors"
	"fmt"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cuda"
	"rlhfstation/engine/config"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
)

// SelectDevice applies the device policy (DESIGN §10) to a --device value. cpu computes on
// the CPU. cuda needs a CUDA device of compute capability 8.0 or newer with NVRTC and cuBLAS:
// otherwise it is refused (a *ConfigError, exit 2) with the reason — no libcuda, cuInit
// failing (100: no device), capability too low, NVRTC or cuBLAS not found with the places
// searched. auto takes CUDA when cuda would be accepted, else the CPU, with a note saying why.
// An unknown name is a *ConfigError.
func SelectDevice(name string) (device, note string, err error) {
	switch name {
	case "cpu":
		return "cpu", "", nil
	case "auto":
		if _, err := cuda.Probe(); err != nil {
			return "cpu", "device auto: using the CPU: " + briefReason(err), nil
		}
		return "cuda", "", nil
	case "cuda":
		if _, err := cuda.Probe(); err != nil {
			return "", "", &ConfigError{fmt.Errorf("--device cuda: %w", err)}
		}
		return "cuda", "", nil
	}
	return "", "", &ConfigError{fmt.Errorf("--device must be auto, cpu or cuda (got %q)", name)}
}

// OpenDevice applies the policy to a --device value and opens the backend it chooses. A CUDA
// device that is found but does not open (its kernels do not compile, a context cannot be
// made) is refused under cuda (a *ConfigError) and gives the CPU under auto, with a note.
func OpenDevice(name string) (b backend.Backend, note string, err error) {
	device, note, err := SelectDevice(name)
	if err != nil {
		return nil, "", err
	}
	b, err = backend.Select(device)
	if err == nil {
		return b, note, nil
	}
	if device == "cuda" && name == "auto" {
		b, cerr := backend.Select("cpu")
		return b, "device auto: using the CPU: " + err.Error(), cerr
	}
	return nil, "", &ConfigError{fmt.Errorf("--device %s: %w", name, err)}
}

// briefReason is the one-line form of why CUDA is unusable, for auto's note.
func briefReason(err error) string {
	var ue *cuda.UnavailableError
	if errors.As(err, &ue) && ue.Brief != "" {
		return ue.Brief
	}
	return err.Error()
}

// DeviceLabel names where b computes, for the run's events and the dashboard: "cpu", or
// "cuda: NVIDIA H100 … (compute 9.0, …)".
func DeviceLabel(b backend.Backend) string {
	if s, ok := b.(fmt.Stringer); ok {
		return s.String()
	}
	return b.Name()
}

// deviceBytes is the device memory b holds (0 for the CPU: its memory is the process's).
func deviceBytes(b backend.Backend) uint64 {
	if d, ok := b.(interface{ DeviceBytes() int64 }); ok {
		return uint64(max(0, d.DeviceBytes()))
	}
	return 0
}

// devicePeakBytes is the most device memory b's buffers held at once (0 for the CPU).
func devicePeakBytes(b backend.Backend) uint64 {
	if d, ok := b.(interface{ PeakBytes() int64 }); ok {
		return uint64(max(0, d.PeakBytes()))
	}
	return 0
}

// checkDeviceMemory refuses a run that cannot fit the GPU, before any of it is put there:
// the model as loaded (its linears 4-bit or not), the adapters c asks for, and the batch's
// sequences. Nothing to check on the CPU (checkMemory did).
func checkDeviceMemory(b backend.Backend, m *model.Model, c *config.Config, promptTokens int) error {
	cb, ok := b.(*cuda.Backend)
	if !ok {
		return nil
	}
	if err := cb.CheckFits(runShape(m, c, promptTokens, cb.Precision())); err != nil {
		return &ConfigError{err}
	}
	return nil
}

// runShape is what the device memory of a GRPO run of c on m depends on, on a backend of
// precision p. promptTokens is the longest prompt in tokens when the prompts are known (0:
// max_prompt_length).
func runShape(m *model.Model, c *config.Config, promptTokens int, p backend.Precision) cuda.RunShape {
	mc := &m.Config
	s := cuda.RunShape{Vocab: mc.Vocab, Dim: mc.Dim, Layers: mc.Layers, Heads: mc.Heads, QDim: mc.QDim(), KVDim: mc.KVDim(),
		Hidden: mc.Hidden, TiedHead: mc.TieEmbed, Quantized: c.Quant.Type != "none",
		Seqs: c.PerDeviceTrainBatchSize * c.NumGenerations, Completion: c.MaxCompletionLength}
	for _, l := range m.Linears() {
		s.LinearParams += int64(l.In) * int64(l.Out)
		s.LargestLinear = max(s.LargestLinear, int64(l.In)*int64(l.Out))
		if _, q := l.W.(*model.Quantized); q {
			s.Quantized = true
		}
		if lora.Selects(c.LoRA.TargetModules, l.Name) {
			s.LoRAParams += int64(c.LoRA.R) * int64(l.In+l.Out)
		}
	}
	prompt := c.MaxPromptLength
	if promptTokens > 0 {
		prompt = min(prompt, promptTokens)
	}
	s.SeqLen = min(prompt+c.MaxCompletionLength, mc.Context())
	f := model.FootprintOf(mc, s.Seqs, s.SeqLen, c.MaxCompletionLength, p)
	s.Tape, s.Grads, s.Passes, s.KVCache = f.Tape, f.Grads, f.Scratch, f.KVCache
	return s
}
