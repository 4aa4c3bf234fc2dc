package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/data/synth"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// BenchmarkServeRewardLoad: 8 concurrent clients each send 50 requests of 16 texts (built-in
// arithmetic problems with worked answers, the math preset: perplexity, NTL, correctness) to a
// live serve-reward on the built-in model. Every answer is checked against the scorer run
// directly; it reports p50/p99 request latency and texts/s, and the ratio of that throughput
// to the anchor: the same scorer called directly, 16 texts a call, in the same process (before
// and after the load, averaged).
//
//	go test ./cli -run '^$' -bench ServeRewardLoad -benchtime 1x
func BenchmarkServeRewardLoad(b *testing.B) {
	const clients, requests, perRequest, pool = 8, 50, 16, 256
	dir, baselines := servedModel(b)
	ps, err := synth.Prompts("math", 3, pool)
	if err != nil {
		b.Fatal(err)
	}
	texts := make([]engine.Text, pool)
	for i, p := range ps {
		texts[i] = engine.Text{Prompt: p.Prompt, Completion: " " + p.Reference, Answer: rewards.GroundTruth(p.Answer)}
	}
	// The expected rewards, and the anchor's throughput.
	m, tok, err := engine.LoadModel(dir)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := presets.Load("math")
	bl, err := loadBaselines(dir, baselines, p, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	direct, err := engine.NewScorer(m, tok, p, bl.Levels)
	if err != nil {
		b.Fatal(err)
	}
	want, err := direct.Score(texts)
	if err != nil {
		b.Fatal(err)
	}
	// The anchor is measured before and after the load, and averaged: the machine is shared.
	anchorRate := func() float64 {
		t0 := time.Now()
		for k := 0; k < pool/perRequest*2; k++ {
			lo := (k * perRequest) % pool
			if _, err := direct.Score(texts[lo : lo+perRequest]); err != nil {
				b.Fatal(err)
			}
		}
		return float64(pool*2) / time.Since(t0).Seconds()
	}
	before := anchorRate()

	url, stop := startServeReward(b, "--preset", "math", "--baselines", baselines)
	defer stop()
	body := func(k int) ([]byte, int) {
		lo := (k * perRequest) % pool
		req := map[string][]string{}
		for _, x := range texts[lo : lo+perRequest] {
			req["query"] = append(req["query"], x.Prompt+x.Completion)
			req["prompts"] = append(req["prompts"], x.Prompt)
			req["labels"] = append(req["labels"], x.Answer)
		}
		raw, _ := json.Marshal(req)
		return raw, lo
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		var mu sync.Mutex
		var latencies []time.Duration
		var failures []string
		var wg sync.WaitGroup
		start := time.Now()
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				client := &http.Client{Timeout: 180 * time.Second}
				for r := 0; r < requests; r++ {
					raw, lo := body(c*requests + r)
					t := time.Now()
					resp, err := client.Post(url+"/get_reward", "application/json", bytes.NewReader(raw))
					var out struct{ Rewards []float64 }
					if err == nil {
						err = json.NewDecoder(resp.Body).Decode(&out)
						resp.Body.Close()
						if err == nil && resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					d := time.Since(t)
					mu.Lock()
					latencies = append(latencies, d)
					if err != nil {
						failures = append(failures, err.Error())
					} else {
						for i, v := range out.Rewards {
							if w := want.Total[lo+i]; math.Abs(v-w) > 1e-6 {
								failures = append(failures, fmt.Sprintf("text %d: %v, want %v", lo+i, v, w))
							}
						}
						if len(out.Rewards) != perRequest {
							failures = append(failures, fmt.Sprintf("%d rewards", len(out.Rewards)))
						}
					}
					mu.Unlock()
				}
			}(c)
		}
		wg.Wait()
		elapsed := time.Since(start)
		if len(failures) > 0 {
			b.Fatalf("%d failures, first: %s", len(failures), failures[0])
		}
		anchor := (before + anchorRate()) / 2
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		q := func(f float64) float64 { return latencies[int(f*float64(len(latencies)-1))].Seconds() * 1000 }
		rate := float64(clients*requests*perRequest) / elapsed.Seconds()
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(rate, "texts/s")
		b.ReportMetric(anchor, "anchor-texts/s")
		b.ReportMetric(rate/anchor, "ratio")
	}
	b.StopTimer()
	stop()
	direct.Close()
}
