/* The lab's stand-in for an image's program, since nothing can be pulled: it says what it
 * stands in for, then waits for SIGTERM as a container's main process does. As a pod sandbox's
 * pause it also reaps the zombies of the Pod's processes.
 *   standin ROLE [WORDS...]   prints "gpuop stand-in ROLE: WORDS" once, then waits */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(int argc, char **argv) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    printf("gpuop stand-in %s:", argc > 1 ? argv[1] : "image");
    for (int i = 2; i < argc; i++) printf(" %s", argv[i]);
    printf(" (pid %d)\n", (int)getpid());
    fflush(stdout);
    for (;;) pause();
}
