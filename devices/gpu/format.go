package gpu

// Pixel formats a 2D resource may have (virtio_gpu_formats). Every one is
// 4 bytes per pixel; the name lists the channels in memory order, so
// Linux's XRGB8888 (a little-endian word 0xXXRRGGBB) is B8G8R8X8.
const (
	formatB8G8R8A8 = 1
	formatB8G8R8X8 = 2
	formatA8R8G8B8 = 3
	formatX8R8G8B8 = 4
	formatR8G8B8A8 = 67
	formatX8B8G8R8 = 68
	formatA8B8G8R8 = 121
	formatR8G8B8X8 = 134
)

// bytesPerPixel is the size of a pixel in every supported format.
const bytesPerPixel = 4

// channels says where red, green and blue sit in a pixel of one format.
type channels struct{ r, g, b int }

// formatChannels maps each supported format to its channel offsets; a
// format not in it is refused at RESOURCE_CREATE_2D.
var formatChannels = map[uint32]channels{
	formatB8G8R8A8: {r: 2, g: 1, b: 0},
	formatB8G8R8X8: {r: 2, g: 1, b: 0},
	formatA8R8G8B8: {r: 1, g: 2, b: 3},
	formatX8R8G8B8: {r: 1, g: 2, b: 3},
	formatR8G8B8A8: {r: 0, g: 1, b: 2},
	formatX8B8G8R8: {r: 3, g: 2, b: 1},
	formatA8B8G8R8: {r: 3, g: 2, b: 1},
	formatR8G8B8X8: {r: 0, g: 1, b: 2},
}
