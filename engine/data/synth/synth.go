// Package synth generates the built-in synthetic corpus of DESIGN §14: text written by this
// package's own grammars and word lists, seeded and deterministic, in four domains named like
// the reward presets:
//
//	story      short stories: characters, places, a problem and its resolution, dialogue
//	technical  explanations of made-up systems: definitions, parts, settings, procedures, faults
//	code       small functions in a Python-like or Go-like style, with comments and worked examples
//	math       arithmetic word problems of one to four steps, their answers worked step by step or
//	           given alone, ending in "#### N"; practice sheets of sums, differences and times tables
//
// Each document has its own random stream, derived from the seed, the domain and the
// document's index, so documents are independent of each other and of how many are made.
// Prompts (for GRPO runs) use streams of their own, so they are held out from the pretraining
// documents of any seed.
package synth

import (
	"fmt"
	"runtime"
	"sync"
)

// domains are the corpus's domains, indexed like makers and prompters.
var domains = [4]string{"story", "technical", "code", "math"}

// Domains returns the domain names: story, technical, code, math.
func Domains() []string { return append([]string(nil), domains[:]...) }

// Doc is one generated document.
type Doc struct {
	Domain string
	Text   string
}

// Prompt is one training prompt. Answer is the ground truth where there is one (math: the
// number); Reference is a reference completion (the rest of the document the prompt was cut
// from, or the worked solution), usable for baselines.
type Prompt struct {
	Prompt    string
	Answer    string
	Reference string
}

// Stream salts: documents and prompts never share a random stream.
const (
	docSalt    = 0x5eed_d0c5_0000_0000
	promptSalt = 0x9e37_79b9_7f4a_7c15
)

type maker func(g *gen) (text string)

// makers and prompters are indexed like Domains.
var (
	makers    = [4]maker{makeStory, makeTechnical, makeCode, makeMath}
	prompters = [4]func(g *gen) Prompt{storyPrompt, technicalPrompt, codePrompt, mathPrompt}
)

func makerFor(domain string) (maker, int, error) {
	for i, d := range domains {
		if d == domain {
			return makers[i], i, nil
		}
	}
	return nil, 0, fmt.Errorf("synth: unknown domain %q (want story, technical, code or math)", domain)
}

// docGen is the generator of document i of domain d under seed.
func docGen(seed int64, d, i int) *gen {
	return newGen(uint64(seed)^docSalt, uint64(d)<<56|uint64(i))
}

// GenerateDomain returns n documents of one domain.
func GenerateDomain(domain string, seed int64, n int) ([]Doc, error) {
	mk, d, err := makerFor(domain)
	if err != nil {
		return nil, err
	}
	docs := make([]Doc, n)
	parallel(n, func(i int) {
		docs[i] = Doc{Domain: domain, Text: mk(docGen(seed, d, i))}
	})
	return docs, nil
}

// shares are the domains' parts of Generate's bytes, indexed like domains: math has half,
// because arithmetic and copying numbers take a small model the most examples to learn.
var shares = [4]int{1, 1, 1, 3}

// Generate returns documents of all four domains, mixed so that each domain has its share of
// the bytes (1/6 each for story, technical and code, 1/2 for math: the next document is always
// of the domain furthest below its share), until their texts hold at least bytes bytes. The
// k-th document of a domain is the same as GenerateDomain's k-th for that seed.
func Generate(seed int64, bytes int) []Doc {
	var docs []Doc
	var size, next [4]int
	var queue [4][]Doc
	total := 0
	for total < bytes {
		d := 0
		for i := range size {
			if size[i]*shares[d] < size[d]*shares[i] {
				d = i
			}
		}
		if len(queue[d]) == 0 { // make the domain's next documents in parallel
			n := min(256, max(8, (bytes-total)/4000))
			queue[d] = make([]Doc, n)
			mk, first := makers[d], next[d]
			parallel(n, func(i int) {
				queue[d][i] = Doc{Domain: domains[d], Text: mk(docGen(seed, d, first+i))}
			})
		}
		doc := queue[d][0]
		queue[d] = queue[d][1:]
		next[d]++
		size[d] += len(doc.Text)
		total += len(doc.Text)
		docs = append(docs, doc)
	}
	return docs
}

// Prompts returns n training prompts of a domain: story openings to continue, technical
// questions and openings, code openings, math problems with their answers.
func Prompts(domain string, seed int64, n int) ([]Prompt, error) {
	_, d, err := makerFor(domain)
	if err != nil {
		return nil, err
	}
	mk := prompters[d]
	out := make([]Prompt, n)
	parallel(n, func(i int) {
		out[i] = mk(newGen(uint64(seed)^promptSalt, uint64(d)<<56|uint64(i)))
	})
	return out, nil
}

// parallel runs f(0..n-1) over the CPUs.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next += 16
				mu.Unlock()
				if i >= n {
					return
				}
				for j := i; j < min(i+16, n); j++ {
					f(j)
				}
			}
		}()
	}
	wg.Wait()
}
