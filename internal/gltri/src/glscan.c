/*
 * glscan: shows a picture drawn with OpenGL ES on the display, the way a
 * compositor does: a GBM surface on /dev/dri/card0, an EGL window surface
 * on it, eglSwapBuffers, then the front buffer as a KMS framebuffer on
 * the CRTC. With --gpu=virgl that buffer is a 3D resource in the host's
 * renderer, and what `smol machine screenshot` shows is read back from
 * it. The picture: the top half red, the bottom half green, so that a
 * screenshot also shows which way up it arrived. It holds the display for
 * the number of seconds given (default 60), then exits.
 */
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES2/gl2.h>
#include <fcntl.h>
#include <gbm.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xf86drm.h>
#include <xf86drmMode.h>

/* step says how far it got, on stderr (unbuffered): a glscan that hangs
 * shows where. */
static void step(const char *what) { fprintf(stderr, "glscan: %s\n", what); }

static void die(const char *what) {
	fprintf(stderr, "glscan: %s failed (EGL error %#x)\n", what, eglGetError());
	exit(1);
}

int main(int argc, char **argv) {
	int hold = argc > 1 ? atoi(argv[1]) : 60;
	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("open /dev/dri/card0");
	drmModeRes *res = drmModeGetResources(fd);
	if (!res || res->count_crtcs < 1)
		die("drmModeGetResources");
	drmModeConnector *conn = NULL;
	for (int i = 0; i < res->count_connectors && !conn; i++) {
		drmModeConnector *c = drmModeGetConnector(fd, res->connectors[i]);
		if (c && c->connection == DRM_MODE_CONNECTED && c->count_modes > 0)
			conn = c;
		else
			drmModeFreeConnector(c);
	}
	if (!conn)
		die("finding a connected display");
	drmModeModeInfo mode = conn->modes[0];
	const int w = mode.hdisplay, h = mode.vdisplay;
	uint32_t crtc = res->crtcs[0];

	step("display found");
	struct gbm_device *gbm = gbm_create_device(fd);
	if (!gbm)
		die("gbm_create_device");
	struct gbm_surface *surf = gbm_surface_create(gbm, w, h, GBM_FORMAT_XRGB8888, GBM_BO_USE_SCANOUT | GBM_BO_USE_RENDERING);
	if (!surf)
		die("gbm_surface_create");
	PFNEGLGETPLATFORMDISPLAYEXTPROC getDisplay =
		(PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
	EGLDisplay dpy = getDisplay(EGL_PLATFORM_GBM_KHR, gbm, NULL);
	if (dpy == EGL_NO_DISPLAY || !eglInitialize(dpy, NULL, NULL) || !eglBindAPI(EGL_OPENGL_ES_API))
		die("eglInitialize");
	static const EGLint cfgAttrs[] = {EGL_SURFACE_TYPE, EGL_WINDOW_BIT, EGL_RENDERABLE_TYPE, EGL_OPENGL_ES2_BIT,
					  EGL_RED_SIZE, 8, EGL_GREEN_SIZE, 8, EGL_BLUE_SIZE, 8, EGL_NONE};
	EGLConfig cfgs[64], cfg = NULL;
	EGLint n = 0;
	if (!eglChooseConfig(dpy, cfgAttrs, cfgs, 64, &n))
		die("eglChooseConfig");
	for (int i = 0; i < n && !cfg; i++) {
		EGLint id;
		if (eglGetConfigAttrib(dpy, cfgs[i], EGL_NATIVE_VISUAL_ID, &id) && id == GBM_FORMAT_XRGB8888)
			cfg = cfgs[i];
	}
	if (!cfg)
		die("finding an XRGB8888 config");
	static const EGLint ctxAttrs[] = {EGL_CONTEXT_CLIENT_VERSION, 2, EGL_NONE};
	EGLContext ctx = eglCreateContext(dpy, cfg, EGL_NO_CONTEXT, ctxAttrs);
	EGLSurface es = eglCreateWindowSurface(dpy, cfg, (EGLNativeWindowType)surf, NULL);
	if (ctx == EGL_NO_CONTEXT || es == EGL_NO_SURFACE || !eglMakeCurrent(dpy, es, es, ctx))
		die("eglCreateWindowSurface");
	printf("renderer: %s\n", (const char *)glGetString(GL_RENDERER));
	step("context made");

	/* GL's window y grows upwards: the scissor's upper half is the top. */
	glViewport(0, 0, w, h);
	glClearColor(0, 1, 0, 1);
	glClear(GL_COLOR_BUFFER_BIT);
	glEnable(GL_SCISSOR_TEST);
	glScissor(0, h / 2, w, h - h / 2);
	glClearColor(1, 0, 0, 1);
	glClear(GL_COLOR_BUFFER_BIT);
	glDisable(GL_SCISSOR_TEST);
	if (!eglSwapBuffers(dpy, es))
		die("eglSwapBuffers");

	step("swapped");
	struct gbm_bo *bo = gbm_surface_lock_front_buffer(surf);
	if (!bo)
		die("gbm_surface_lock_front_buffer");
	uint32_t fb;
	if (drmModeAddFB(fd, w, h, 24, 32, gbm_bo_get_stride(bo), gbm_bo_get_handle(bo).u32, &fb))
		die("drmModeAddFB");
	step("framebuffer added");
	if (drmModeSetCrtc(fd, crtc, fb, 0, 0, &conn->connector_id, 1, &mode))
		die("drmModeSetCrtc");
	printf("shown: %dx%d\n", w, h);
	fflush(stdout);
	sleep(hold);
	return 0;
}
