package syncbuf

import "testing"

func TestTailKeepsTheEnd(t *testing.T) {
	tail := NewTail(5)
	tail.Write([]byte("abc"))
	tail.Write([]byte("defg"))
	if got := tail.String(); got != "cdefg" {
		t.Fatalf("tail = %q, want %q", got, "cdefg")
	}
}
