#include "textflag.h"

// func outb(port uint16, value uint8)
TEXT ·outb(SB), NOSPLIT, $0-3
	MOVW port+0(FP), DX
	MOVB value+2(FP), AL
	OUTB
	RET
