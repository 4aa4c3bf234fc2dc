package cpu

import "math"

// AdamWParam is one float32 tensor with its gradient and moments.
type AdamWParam struct{ Data, Grad, M, V []float32 }

// AdamW applies one update (step counts from 1) as torch.optim.AdamW:
//
//	p ← p − lr·λ·p;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	p ← p − lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)
func AdamW(params []AdamWParam, lr, beta1, beta2, eps, weightDecay float64, step int) {
	t := float64(step)
	bc1 := 1 - math.Pow(beta1, t)
	bc2 := 1 - math.Pow(beta2, t)
	b1, b2 := float32(beta1), float32(beta2)
	decay := float32(1 - lr*weightDecay)
	stepSize := lr / bc1
	sqrtBC2 := math.Sqrt(bc2)
	for _, p := range params {
		for i, g := range p.Grad {
			m := b1*p.M[i] + (1-b1)*g
			v := b2*p.V[i] + (1-b2)*g*g
			p.M[i], p.V[i] = m, v
			denom := math.Sqrt(float64(v))/sqrtBC2 + eps
			p.Data[i] = p.Data[i]*decay - float32(stepSize*float64(m)/denom)
		}
	}
}
