package virgl

// The virtio-gpu commands and responses that reach the renderer (virtio
// 1.2, section 5.7.6.7), for the device that forwards them and the helper
// that serves them.
const (
	CmdResourceUnref         = 0x0102
	CmdResourceDetachBacking = 0x0107
	CmdGetCapsetInfo         = 0x0108
	CmdGetCapset             = 0x0109
	CmdCtxCreate             = 0x0200
	CmdCtxDestroy            = 0x0201
	CmdCtxAttachResource     = 0x0202
	CmdCtxDetachResource     = 0x0203
	CmdResourceCreate3D      = 0x0204
	CmdTransferToHost3D      = 0x0205
	CmdTransferFromHost3D    = 0x0206
	CmdSubmit3D              = 0x0207

	RespOKNoData            = 0x1100
	RespOKCapsetInfo        = 0x1102
	RespOKCapset            = 0x1103
	RespErrUnspec           = 0x1200
	RespErrInvalidResource  = 0x1203
	RespErrInvalidContext   = 0x1204
	RespErrInvalidParameter = 0x1205

	// FlagFence in a command's header asks for its fence.
	FlagFence = 1
	// HeaderSize is virtio_gpu_ctrl_hdr's.
	HeaderSize = 24
	// SubmitHeaderSize is SUBMIT_3D's fixed part: the header, the
	// command buffer's size and padding.
	SubmitHeaderSize = HeaderSize + 8
	// Create3DSize is RESOURCE_CREATE_3D's.
	Create3DSize = HeaderSize + 48
)
