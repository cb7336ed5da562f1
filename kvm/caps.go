package kvm

// Cap names a KVM capability (KVM_CAP_*), queried with CheckExtension and
// sometimes switched on with EnableCap. The values are ABI and fixed.
type Cap uint32

// Capabilities the VMM asks about. The comment says what a positive answer
// means when it is more than "supported".
const (
	CapIRQChip                Cap = 0
	CapHLT                    Cap = 1
	CapUserMemory             Cap = 3
	CapSetTSSAddr             Cap = 4
	CapExtCPUID               Cap = 7
	CapNrVCPUs                Cap = 9  // recommended maximum number of vCPUs
	CapNrMemslots             Cap = 10 // number of memory slots
	CapPIT                    Cap = 11
	CapMPState                Cap = 14
	CapCoalescedMMIO          Cap = 15 // page offset of the coalesced-MMIO ring in the vCPU mapping
	CapSyncMMU                Cap = 16
	CapUserNMI                Cap = 22
	CapSetGuestDebug          Cap = 23
	CapIRQRouting             Cap = 25
	CapIRQInjectStatus        Cap = 26
	CapIRQFD                  Cap = 32
	CapPIT2                   Cap = 33
	CapSetBootCPUID           Cap = 34
	CapPITState2              Cap = 35
	CapIOEventFD              Cap = 36
	CapSetIdentityMapAddr     Cap = 37
	CapAdjustClock            Cap = 39 // bitmask of ClockData flags KVM_GET_CLOCK can report
	CapInternalErrorData      Cap = 40
	CapVCPUEvents             Cap = 41
	CapDebugRegs              Cap = 50
	CapEnableCap              Cap = 54
	CapXSave                  Cap = 55
	CapXCRs                   Cap = 56
	CapAsyncPF                Cap = 59
	CapTSCControl             Cap = 60
	CapGetTSCKHz              Cap = 61
	CapMaxVCPUs               Cap = 66 // hard maximum number of vCPUs
	CapTSCDeadlineTimer       Cap = 72
	CapKVMClockCtrl           Cap = 76
	CapSignalMSI              Cap = 77
	CapReadonlyMem            Cap = 81
	CapIRQFDResample          Cap = 82
	CapIOEventFDNoLength      Cap = 100
	CapCheckExtensionVM       Cap = 105
	CapSplitIRQChip           Cap = 121
	CapIOEventFDAnyLength     Cap = 122
	CapMaxVCPUID              Cap = 128
	CapX2APICAPI              Cap = 129
	CapImmediateExit          Cap = 136
	CapX86DisableExits        Cap = 143
	CapGetMSRFeatures         Cap = 153
	CapExceptionPayload       Cap = 164
	CapManualDirtyLogProtect2 Cap = 168
	CapDirtyLogRing           Cap = 192 // size in bytes of the largest dirty ring
	CapSregs2                 Cap = 200
	CapXSave2                 Cap = 208 // size in bytes KVM_GET_XSAVE2 needs
	CapSysAttributes          Cap = 209
	CapVMTSCControl           Cap = 214
	CapSystemEventData        Cap = 215
	CapX86TripleFaultEvent    Cap = 218
	CapDirtyLogRingAcqRel     Cap = 223
	CapUserMemory2            Cap = 231
	CapGuestMemfd             Cap = 234
	CapVMTypes                Cap = 235
)
