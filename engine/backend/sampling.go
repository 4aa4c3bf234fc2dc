package backend

// Sampler is a backend whose decode step may take an approximation that only the sampled
// tokens see: Sampling is the backend for the step's fused 4-bit linears (Q4Linear,
// Q4Linears). Every other product, and every pass whose numbers are kept (training, the
// reference and old log-probs), goes through the backend itself.
type Sampler interface {
	Sampling() Backend
}

// SamplingOf is the backend for the decode step's 4-bit linears: b's Sampling when b is a
// Sampler, else b.
func SamplingOf(b Backend) Backend {
	if s, ok := b.(Sampler); ok {
		return s.Sampling()
	}
	return b
}
