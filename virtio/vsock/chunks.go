package vsock

// chunkQueue is host data waiting for the guest: the chunks the reader
// handed over, in order, consumed from the front. Chunks are never copied
// together; a packet for the guest takes its payload from one chunk.
type chunkQueue struct {
	chunks [][]byte
	size   int // bytes in all chunks
}

// Len returns the number of bytes queued.
func (q *chunkQueue) Len() int { return q.size }

// push appends b, which the queue now owns.
func (q *chunkQueue) push(b []byte) {
	if len(b) == 0 {
		return
	}
	q.chunks = append(q.chunks, b)
	q.size += len(b)
}

// take removes and returns up to n bytes from the front, all from the first
// chunk; nil when the queue is empty or n is not positive. The result
// aliases the chunk and stays valid: the queue never writes into chunks.
func (q *chunkQueue) take(n int) []byte {
	if len(q.chunks) == 0 || n <= 0 {
		return nil
	}
	first := q.chunks[0]
	n = min(n, len(first))
	out := first[:n:n]
	if n == len(first) {
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
	} else {
		q.chunks[0] = first[n:]
	}
	q.size -= n
	return out
}

// reset drops everything queued.
func (q *chunkQueue) reset() { *q = chunkQueue{} }
