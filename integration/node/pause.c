/*
 * The process that holds a pod sandbox's namespaces on the test node (the "pause" container the
 * CRI runtime starts first in every pod). There is no registry here to pull one from, so
 * integration/node/build-images.sh compiles this file statically and packs it into a local image.
 *
 * It sleeps until a signal arrives: SIGTERM or SIGINT end it (exit 0), SIGCHLD makes it reap
 * every exited child (it may be PID 1 of a pod that shares its PID namespace).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void reap(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = stop;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        return 1;
    }
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
