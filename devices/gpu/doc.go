// Package gpu is smol's virtio-gpu device (virtio 1.2, section 5.7): a
// display the guest draws into, which the host can screenshot and show.
//
// It implements the 2D command set in pure Go inside the VMM: the guest
// creates resources (pixel buffers), backs them with its own pages
// (ATTACH_BACKING, a scatter-gather list of guest RAM), copies rectangles
// of that backing into the host's copy of the resource
// (TRANSFER_TO_HOST_2D), points the one scanout at a resource
// (SET_SCANOUT) and says which part changed (RESOURCE_FLUSH). The host's
// copy is what Screenshot reads, so a screenshot never touches guest RAM
// and shows exactly what the guest last transferred. The cursor queue
// carries the cursor's image and position.
//
// Why the host keeps its own copy rather than reading the backing pages
// at screenshot time: the guest owns those pages and may reuse them at
// any moment; the protocol's transfer step is the guest saying "this is
// the picture now", which is what a screenshot must show.
//
// Every value the guest sends is checked before use: resource IDs,
// rectangles against the resource's size, transfer offsets against the
// backing's length, every backing entry against guest RAM (entries must
// not overlap), and host memory is bounded per machine (Limits): at most
// MaxResources resources, MaxHostBytes of pixel data in all, and
// MaxBackingEntries scatter-gather entries per resource. A request that
// breaks a rule is answered with the virtio-gpu error the spec gives for
// it and changes nothing.
//
// 3D (virgl) needs a Renderer (Config.Renderer; package
// devices/gpu/virgl runs virglrenderer in a sandboxed helper process).
// With one the device offers VIRTIO_GPU_F_VIRGL and the renderer's
// capsets, and forwards the 3D commands (contexts, 3D resources, their
// transfers, command submission, capsets) and the resource commands that
// name a 3D resource. Resource IDs are one namespace across the two
// tables; 3D resources count against MaxResources; a 3D resource's
// backing list is checked exactly like a 2D one's before the renderer
// sees it. A 3D resource can be on the scanout: each RESOURCE_FLUSH of it
// reads the scanout's rectangle back from the renderer into the host's
// copy (Renderer.ReadScanout), which is what Screenshot shows, as for 2D.
// A renderer that fails turns every later 3D command into
// VIRTIO_GPU_RESP_ERR_UNSPEC and leaves the 2D display working. Without
// a renderer 3D commands are answered with VIRTIO_GPU_RESP_ERR_UNSPEC:
// the device does not offer the feature, so a conforming driver never
// sends them.
package gpu
