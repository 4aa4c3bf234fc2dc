package tokenizer

import (
	"unicode/utf8"

	"github.com/sugarme/tokenizer/pretokenizer"
)

// The byte-level alphabet of GPT-2: every byte is shown as one printable character
// ('Ġ' for a space), so that a BPE vocabulary over those characters covers every input.
// The table itself is sugarme/tokenizer's; we keep it as arrays for speed.
var (
	byteChar  [256]string       // byte → its character, as a UTF-8 string
	charByte  = map[rune]byte{} // character → byte
	byteRunes [256]rune         // byte → its character
)

func init() {
	for b, s := range pretokenizer.BytesChar {
		r, _ := utf8.DecodeRuneInString(s)
		byteChar[b] = s
		byteRunes[b] = r
		charByte[r] = b
	}
	if len(charByte) != 256 {
		panic("tokenizer: byte-level alphabet is not a bijection")
	}
}

// byteLevelString maps raw bytes to their byte-level characters.
func byteLevelString(raw []byte) string {
	n := 0
	for _, b := range raw {
		n += len(byteChar[b])
	}
	out := make([]byte, 0, n)
	for _, b := range raw {
		out = append(out, byteChar[b]...)
	}
	return string(out)
}

// unByteLevel maps a byte-level token back to raw bytes. A token holding a character
// outside the alphabet (an added token such as "<s> " or a foreign vocabulary entry)
// stands for its own UTF-8 bytes, as Hugging Face's ByteLevel decoder does.
func unByteLevel(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := charByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}

// lossyUTF8 turns bytes into a valid string, replacing each maximal ill-formed
// subsequence with one U+FFFD (the rule of Rust's String::from_utf8_lossy, which
// Hugging Face's decoders use).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return string(out)
}

// maximalSubpart is the length of the longest prefix of b that starts a well-formed
// UTF-8 sequence without completing it (at least 1), per Unicode Table 3-7.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		n++
	}
	return n
}
