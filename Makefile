# smol — build, kernel, box and tests. `make help` lists the targets.
GO      ?= go
export CGO_ENABLED := 0
TIMEOUT ?= 80m
RUN     ?= bin/smol run --initrd build/initramfs.cpio
N       ?= 10
ROUNDS  ?= 3

.PHONY: all build gpu kernel box-kernel stock-kernel guest box test unit-test test-integration bench-boot bench-image bench-devices bench-machine bench-net bench-fork bench-pack bench-shim bench-gpu bench-flood critest hwkvm-bundle demo deps vet fmt clean help FORCE

all: build

help:
	@echo "make deps          install build/test dependencies (apt)"
	@echo "make build         bin/smol, bin/containerd-shim-smol-v2 (and bin/smolbox)"
	@echo "make gpu           bin/smol-gpu, the 3D renderer helper for --gpu=virgl (cgo, libvirglrenderer-dev)"
	@echo "make kernel        build/vmlinux, the guest kernel (cached per machine)"
	@echo "make box-kernel    build/box-vmlinux, the test box's kernel"
	@echo "make guest         build/init, build/nettool, build/initramfs.cpio (the demo guest), build/agent.cpio (the image agent)"
	@echo "make box RUN='…'   run a shell command inside the test box (SMOLBOX_TIMEOUT=30m bounds it)"
	@echo "make demo          deps + everything + boot the demo guest (in the box here)"
	@echo "make test          unit tests, KVM-layer tests and integration tests in the box"
	@echo "make bench-boot    smol vs QEMU microvm boot-to-init, same devices and bare (N=$(N); BASE=<commit> adds that commit's smol)"
	@echo "make bench-image   cached image run vs bare boot (box), and 100 MiB image unpack vs tar+mke2fs"
	@echo "make bench-devices smol vs QEMU microvm virtio blk/net/vsock throughput (ROUNDS=$(ROUNDS))"
	@echo "make bench-machine machine exec/start/cp against smol run and a cat pipe, idle VMM memory (N=$(N))"
	@echo "make bench-pack    pack size and time of a 500 MiB image vs zstd -3 (here), create --from + start vs the cached image's machine (box) (N=$(N))"
	@echo "make bench-shim    a pod start through containerd's CRI and the shim vs smol run -- true (box) (N=$(N))"
	@echo "make bench-fork    VMM side of a fork (Fork to the child's first KVM_RUN) vs a fresh start, 256M/1G/4G (N=$(N); host /dev/kvm)"
	@echo "make bench-flood   guest deaths under a serial-console flood, smol vs QEMU microvm, same kernel and vCPUs (box, N=$(N) rounds)"
	@echo "make hwkvm-bundle  build/hwkvm.tar.xz: what scripts/hwkvm.sh measures with on a host with hardware KVM and nothing installed"
	@echo "make bench-gpu     full-screen display updates/s, smol vs QEMU virtio-gpu-device (box, ROUNDS=$(ROUNDS)); screenshot time; 3D through virgl vs the host's GL"
	@echo "make critest       Kubernetes' CRI validation suite (cri-tools' critest) with runc and with smol's shim, pass/fail counts (box)"
	@echo "make bench-net     smol's userspace gateway vs QEMU with passt and slirp (and smol on a TAP): TCP both ways, connection setup (ROUNDS=$(ROUNDS))"

build: bin/smol bin/smolbox bin/containerd-shim-smol-v2

# bin/smol carries its guest kernel and agent (package guestbin): a copy
# of it alone runs guests.
bin/smol: FORCE kernel guest
	$(GO) run ./internal/guestbin/mkassets -o internal/guestbin/assets build/vmlinux build/agent.cpio
	$(GO) build -tags smol_embed -o $@ ./cmd/smol

# The containerd shim carries the guest too: it is its machines' VMM.
# static_build keeps Go's plugin package out should cgo be enabled
# (cmd/containerd-shim-smol-v2/pluginbuild.go).
bin/containerd-shim-smol-v2: FORCE bin/smol
	$(GO) build -tags smol_embed,static_build -o $@ ./cmd/containerd-shim-smol-v2

# The 3D renderer helper: the one cgo binary (virglrenderer), found by
# smol beside its own executable.
gpu: bin/smol-gpu

bin/smol-gpu: FORCE
	CGO_ENABLED=1 $(GO) build -o $@ ./cmd/smol-gpu

bin/smolbox: FORCE
	$(GO) build -o $@ ./cmd/smolbox

kernel:
	@guest/kernel/build.sh build/vmlinux guest/kernel/guest.config

box-kernel:
	@guest/kernel/build.sh build/box-vmlinux box/kernel.config

stock-kernel:
	@scripts/stock-kernel.sh build/stock-vmlinuz

build/init: FORCE
	$(GO) build -o $@ ./guest/init

build/nettool: FORCE
	$(GO) build -o $@ ./guest/nettool

build/agent: FORCE
	$(GO) build -ldflags='-s -w' -o $@ ./guest/agent

guest: build/init build/nettool build/agent
	$(GO) run ./guest/mkinitramfs -o build/initramfs.cpio -init build/init -rc guest/demo/rc
	$(GO) run ./guest/mkinitramfs -o build/agent.cpio -init build/agent

box: bin/smolbox bin/smol box-kernel
	@bin/smolbox '$(RUN)'

deps:
	@scripts/install-deps.sh

demo: deps build kernel box-kernel guest
	@$(MAKE) --no-print-directory box RUN='bin/smol run --initrd build/initramfs.cpio --cpus 2 --mem 512M'

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

unit-test:
	CGO_ENABLED=1 $(GO) test -race -short ./...

# Unit and KVM-layer tests run with the race detector (which needs cgo;
# the binaries themselves stay CGO_ENABLED=0). Package box's tests boot a
# box, whose software CPU and I/O thread take the cores: they run on their own, after
# the rest, as the timing-bound tests on the host's /dev/kvm (a forked
# counting guest must count on within a minute) starved beside them (a
# clean-clone CI run on 2026-12-05: 250 exits in that minute). The
# integration tests run alone, last: their box wants the cores, and a
# busy host makes nested guests unreliable (README, known issue).
# -v streams each test's start and end as it happens, so a CI log shows
# where a run that stalls is (go test holds a package's output otherwise).
test: build gpu kernel box-kernel stock-kernel guest
	$(GO) vet ./...
	$(GO) vet -tags smol_embed ./internal/guestbin
	CGO_ENABLED=1 $(GO) test -race -timeout $(TIMEOUT) $$($(GO) list ./... | grep -v -e '/integration$$' -e '/box$$')
	CGO_ENABLED=1 $(GO) test -race -timeout $(TIMEOUT) ./box
	$(GO) test -v -timeout $(TIMEOUT) ./integration

# BASE=<commit> also boots that commit's smol, built in a temporary git
# worktree under /tmp (bench/boot/base.sh), in the same box run as this
# tree's (the boot order is shuffled every round): a change checked against
# main in one session. BENCH_FLAGS adds bench flags (-diagnose, -cmdline …).
bench-boot: build kernel box-kernel guest
	$(GO) build -o bin/bench-boot ./bench/boot
	@set -e; base=; also=; \
	if [ -n "$(BASE)" ]; then \
		base=$$(GO=$(GO) bench/boot/base.sh '$(BASE)'); \
		also="-also base@$$(git rev-parse --short '$(BASE)^{commit}')=$$base/smol"; \
	fi; \
	trap 'rm -rf "$$base"' EXIT; \
	cpu=$$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n1 | tr -d "'"); \
	echo "bench-boot: host $$cpu, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	bin/smolbox "bin/bench-boot -n $(N) $$also -commit $$(git describe --always --dirty) -machine '$$cpu' $(BENCH_FLAGS)"

bench-image: build kernel box-kernel guest
	$(GO) build -o bin/bench-image ./bench/image
	@bin/bench-image -only unpack -n $(ROUNDS)
	@bin/smolbox "bin/bench-image -only run -n $(N)"

bench-devices: build kernel box-kernel guest
	$(GO) build -o bin/bench-devices ./bench/devices
	@bin/smolbox "bin/bench-devices -rounds $(ROUNDS) $(BENCH_FLAGS)"

# The 2D display against QEMU's, the screenshot, then 3D through virgl
# against the same GL program on the host (bench/virgl: -prepare builds
# its Debian image with Mesa on the host, outside the box).
bench-gpu: build gpu kernel box-kernel guest
	$(GO) build -o bin/bench-gpu ./bench/gpu
	@bin/smolbox "bin/bench-gpu -rounds $(ROUNDS)"
	CGO_ENABLED=1 $(GO) test -run XXX -bench Screenshot -benchtime 20x ./devices/gpu
	$(GO) build -o bin/bench-virgl ./bench/virgl
	@set -e; flags=$$(bin/bench-virgl -prepare); bin/smolbox "bin/bench-virgl -rounds $(ROUNDS) $$flags"

bench-net: build kernel box-kernel guest
	$(GO) build -o bin/bench-net ./bench/net
	@bin/smolbox "bin/bench-net -rounds $(ROUNDS)"

bench-fork:
	$(GO) run ./bench/fork -n $(N)

bench-flood: build kernel box-kernel guest
	$(GO) build -o bin/bench-flood ./bench/flood
	@bin/smolbox "bin/bench-flood -n $(N) $(BENCH_FLAGS)"

# What scripts/hwkvm.sh needs on a machine with hardware KVM where nothing
# can be installed, in one compressed file to carry there.
# Stripped (-s -w): the file must stay under the 64 MiB a call carries.
hwkvm-bundle: build guest
	$(GO) build -ldflags='-s -w' -o bin/bench-boot ./bench/boot
	$(GO) build -ldflags='-s -w' -o bin/bench-fork ./bench/fork
	mkdir -p build/hwkvm
	for p in kvm vmm snapshot integration; do $(GO) test -ldflags='-s -w' -c -o build/hwkvm/$$p.test ./$$p || exit 1; done
	$(GO) build -tags smol_embed -ldflags='-s -w' -o build/hwkvm/smol ./cmd/smol
	git describe --always --dirty > build/hwkvm-commit
	XZ_OPT='-9 -T2' tar -cJf build/hwkvm.tar.xz --transform 's|^build/hwkvm/smol$$|bin/smol|' build/hwkvm/smol bin/bench-boot bin/bench-fork \
		build/vmlinux build/init build/initramfs.cpio build/agent.cpio build/nettool build/hwkvm/*.test build/hwkvm-commit
	@ls -l build/hwkvm.tar.xz

bench-pack: build kernel box-kernel guest
	$(GO) build -o bin/bench-pack ./bench/pack
	@bin/bench-pack -only size -n $(N)
	@bin/smolbox "bin/bench-pack -only start -n $(N)"

bench-shim: build kernel box-kernel guest
	$(GO) build -o bin/bench-shim ./bench/shim
	@bin/smolbox "bin/bench-shim -n $(N)"

critest: build kernel box-kernel guest
	scripts/build-critest.sh build/critest
	$(GO) build -o bin/critest-run ./tools/critest
	@bin/smolbox "bin/critest-run $(CRITEST_FLAGS)"

bench-machine: build kernel box-kernel guest
	$(GO) build -o bin/bench-machine ./bench/machine
	@bin/smolbox "bin/bench-machine -n $(N)"

clean:
	rm -rf bin build
