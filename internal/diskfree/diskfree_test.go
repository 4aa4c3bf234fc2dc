package diskfree

import "testing"

func TestBytesOfATempFolder(t *testing.T) {
	free, ok := Bytes(t.TempDir())
	if !ok || free == 0 {
		t.Fatalf("Bytes(temp folder) = %d, %v: want some free space", free, ok)
	}
	if _, ok := Bytes("/no/such/folder/here"); ok {
		t.Error("Bytes of a missing folder reports ok")
	}
}
