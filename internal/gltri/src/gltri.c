/*
 * gltri: draws with OpenGL ES 2 through EGL on Mesa's surfaceless
 * platform (no window system), reads the pixels back and prints what it
 * saw. The same binary runs in a guest (Mesa's virgl driver on
 * /dev/dri/renderD128, rendering on the host through smol-gpu) and on the
 * host (llvmpipe), so the two can be compared. Package internal/gltri
 * compiles it; integration/virgl_test.go and bench/virgl run it.
 *
 *   gltri            one red triangle on black, 64x64
 *   gltri bench N    N frames of 256 flat-coloured triangles, 256x256:
 *                    many small draws, the API and command stream's cost
 *   gltri fill N     N frames of 8 blended full-screen quads, 1024x1024:
 *                    few draws, the pixels' cost
 *
 * Output, one "key: value" per line: renderer, center and corner pixels
 * (RGBA hex), the FNV-1a hash of all pixels, and for bench the time.
 */
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES2/gl2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
	fprintf(stderr, "gltri: %s failed (EGL error %#x, GL error %#x)\n", what, eglGetError(), glGetError());
	exit(1);
}

static GLuint shader(GLenum type, const char *src) {
	GLuint s = glCreateShader(type);
	glShaderSource(s, 1, &src, NULL);
	glCompileShader(s);
	GLint ok = 0;
	glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
	if (!ok)
		die("shader compile");
	return s;
}

int main(int argc, char **argv) {
	int frames = 0, fill = 0;
	if (argc == 3 && (strcmp(argv[1], "bench") == 0 || strcmp(argv[1], "fill") == 0)) {
		frames = atoi(argv[2]);
		fill = argv[1][0] == 'f';
	}
	const int size = fill ? 1024 : frames ? 256 : 64;

	PFNEGLGETPLATFORMDISPLAYEXTPROC getDisplay =
		(PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
	if (!getDisplay)
		die("eglGetPlatformDisplayEXT");
	EGLDisplay dpy = getDisplay(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
	if (dpy == EGL_NO_DISPLAY || !eglInitialize(dpy, NULL, NULL))
		die("eglInitialize");
	if (!eglBindAPI(EGL_OPENGL_ES_API))
		die("eglBindAPI");
	static const EGLint cfgAttrs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE, EGL_OPENGL_ES2_BIT, EGL_NONE};
	EGLConfig cfg;
	EGLint n = 0;
	if (!eglChooseConfig(dpy, cfgAttrs, &cfg, 1, &n) || n != 1)
		die("eglChooseConfig");
	static const EGLint ctxAttrs[] = {EGL_CONTEXT_CLIENT_VERSION, 2, EGL_NONE};
	EGLContext ctx = eglCreateContext(dpy, cfg, EGL_NO_CONTEXT, ctxAttrs);
	if (ctx == EGL_NO_CONTEXT || !eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx))
		die("eglCreateContext");
	printf("renderer: %s\n", (const char *)glGetString(GL_RENDERER));

	GLuint tex, fbo;
	glGenTextures(1, &tex);
	glBindTexture(GL_TEXTURE_2D, tex);
	glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, size, size, 0, GL_RGBA, GL_UNSIGNED_BYTE, NULL);
	glGenFramebuffers(1, &fbo);
	glBindFramebuffer(GL_FRAMEBUFFER, fbo);
	glFramebufferTexture2D(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, tex, 0);
	if (glCheckFramebufferStatus(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE)
		die("framebuffer");
	glViewport(0, 0, size, size);

	GLuint prog = glCreateProgram();
	glAttachShader(prog, shader(GL_VERTEX_SHADER,
		"attribute vec2 pos;\n"
		"void main() { gl_Position = vec4(pos, 0.0, 1.0); }\n"));
	glAttachShader(prog, shader(GL_FRAGMENT_SHADER,
		"precision mediump float;\n"
		"uniform vec4 color;\n"
		"void main() { gl_FragColor = color; }\n"));
	glBindAttribLocation(prog, 0, "pos");
	glLinkProgram(prog);
	GLint ok = 0;
	glGetProgramiv(prog, GL_LINK_STATUS, &ok);
	if (!ok)
		die("link");
	glUseProgram(prog);
	GLint color = glGetUniformLocation(prog, "color");
	glEnableVertexAttribArray(0);

	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!frames) {
		static const GLfloat tri[] = {-0.5f, -0.5f, 0.5f, -0.5f, 0.0f, 0.5f};
		glClearColor(0, 0, 0, 1);
		glClear(GL_COLOR_BUFFER_BIT);
		glVertexAttribPointer(0, 2, GL_FLOAT, GL_FALSE, 0, tri);
		glUniform4f(color, 1, 0, 0, 1);
		glDrawArrays(GL_TRIANGLES, 0, 3);
	} else if (fill) {
		/* Each quad covers the whole target, blended at half alpha: the
		 * arithmetic is exact 8-bit unorm in any renderer. */
		static const GLfloat quad[] = {-1, -1, 1, -1, -1, 1, 1, -1, 1, 1, -1, 1};
		GLuint vbo;
		glGenBuffers(1, &vbo);
		glBindBuffer(GL_ARRAY_BUFFER, vbo);
		glBufferData(GL_ARRAY_BUFFER, sizeof quad, quad, GL_STATIC_DRAW);
		glVertexAttribPointer(0, 2, GL_FLOAT, GL_FALSE, 0, NULL);
		glEnable(GL_BLEND);
		glBlendFunc(GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA);
		for (int f = 0; f < frames; f++) {
			glClearColor(0, 0, 0, 1);
			glClear(GL_COLOR_BUFFER_BIT);
			for (int i = 0; i < 8; i++) {
				glUniform4f(color, (float)((i * 31 + f) % 256) / 255.0f, (float)((i * 67) % 256) / 255.0f,
					    (float)((f * 13) % 256) / 255.0f, 128.0f / 255.0f);
				glDrawArrays(GL_TRIANGLES, 0, 6);
			}
		}
	} else {
		/* Triangles on a 16x16 grid, each a flat colour whose channels
		 * are whole multiples of 1/255: exact in any renderer. */
		GLfloat tris[256 * 6];
		for (int i = 0; i < 256; i++) {
			float x = (float)(i % 16) / 8.0f - 1.0f, y = (float)(i / 16) / 8.0f - 1.0f;
			GLfloat *t = &tris[i * 6];
			t[0] = x; t[1] = y; t[2] = x + 0.125f; t[3] = y; t[4] = x; t[5] = y + 0.125f;
		}
		/* In a vertex buffer, uploaded once, as a real program keeps its
		 * geometry: client-side arrays would make the driver upload them
		 * again for every draw. */
		GLuint vbo;
		glGenBuffers(1, &vbo);
		glBindBuffer(GL_ARRAY_BUFFER, vbo);
		glBufferData(GL_ARRAY_BUFFER, sizeof tris, tris, GL_STATIC_DRAW);
		glVertexAttribPointer(0, 2, GL_FLOAT, GL_FALSE, 0, NULL);
		for (int f = 0; f < frames; f++) {
			glClearColor(0, 0, (float)(f % 256) / 255.0f, 1);
			glClear(GL_COLOR_BUFFER_BIT);
			for (int i = 0; i < 256; i++) {
				glUniform4f(color, (float)((i * 7 + f) % 256) / 255.0f, (float)(i % 256) / 255.0f,
					    (float)((255 - i + f) % 256) / 255.0f, 1);
				glDrawArrays(GL_TRIANGLES, i * 3, 3);
			}
		}
	}
	uint8_t *px = malloc((size_t)size * size * 4);
	glReadPixels(0, 0, size, size, GL_RGBA, GL_UNSIGNED_BYTE, px);
	glFinish();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (glGetError() != GL_NO_ERROR)
		die("drawing");

	uint64_t hash = 1469598103934665603ULL;
	for (size_t i = 0; i < (size_t)size * size * 4; i++)
		hash = (hash ^ px[i]) * 1099511628211ULL;
	const uint8_t *c = px + ((size / 2) * size + size / 2) * 4, *k = px + (2 * size + 2) * 4;
	printf("center: %02x%02x%02x%02x\n", c[0], c[1], c[2], c[3]);
	printf("corner: %02x%02x%02x%02x\n", k[0], k[1], k[2], k[3]);
	printf("hash: %016llx\n", (unsigned long long)hash);
	if (frames)
		printf("ms: %.1f\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	return 0;
}
