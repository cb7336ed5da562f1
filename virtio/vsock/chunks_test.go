package vsock

import (
	"bytes"
	"testing"
)

func TestChunkQueueKeepsOrderAndCount(t *testing.T) {
	var q chunkQueue
	q.push([]byte("hello "))
	q.push(nil)
	q.push([]byte("world"))
	if q.Len() != 11 {
		t.Fatalf("Len %d, want 11", q.Len())
	}
	var got []byte
	var sizes []int
	for q.Len() > 0 {
		b := q.take(4)
		sizes = append(sizes, len(b))
		got = append(got, b...)
	}
	// Takes stop at chunk boundaries: 4, 2 of "hello ", then 4, 1.
	if !bytes.Equal(got, []byte("hello world")) || len(sizes) != 4 || sizes[1] != 2 || sizes[3] != 1 {
		t.Fatalf("got %q in sizes %v", got, sizes)
	}
	if b := q.take(4); b != nil {
		t.Fatalf("take from empty queue = %q", b)
	}
	q.push([]byte("x"))
	if b := q.take(0); b != nil || q.Len() != 1 {
		t.Fatalf("take(0) = %q, Len %d", b, q.Len())
	}
	q.reset()
	if q.Len() != 0 || q.take(1) != nil {
		t.Fatal("reset left data")
	}
}
