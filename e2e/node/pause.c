/* The pod sandbox's process: holds the pod's namespaces open until it is told to stop, and reaps
 * the zombies of a pod sharing its process namespace. Built static into the sandbox image
 * (e2e/scripts/build-images.sh) because no image registry is reachable from the test node. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {.sa_handler = stop};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  sigaction(SIGCHLD, &child, NULL);
  for (;;) {
    pause();
  }
}
