// Package diskfree tells how much space is left for an unprivileged writer on the file
// system that holds a path, so that long work can refuse to start, or stop cleanly, before a
// write fails half way.
package diskfree

// Bytes returns the bytes available to a writer on path's file system; ok is false where
// the platform or the file system cannot tell.
func Bytes(path string) (free uint64, ok bool) { return bytesAvailable(path) }
