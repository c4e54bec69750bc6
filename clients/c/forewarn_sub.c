/*
 * forewarn_sub: subscribe to a forewarn agent from C and print each notice, one JSON per line.
 *
 * Build:  cc -O2 -Wall -o forewarn_sub forewarn_sub.c $(pkg-config --cflags --libs libzmq)
 * Run:    ./forewarn_sub [ENDPOINT] [--count N]
 *
 * ENDPOINT defaults to $FOREWARN_EVENTS, else ipc://$FOREWARN_RUNTIME_DIR/events, else
 * ipc:///run/forewarn/events. Each message has two frames: the topic ("notice") and the
 * notice as UTF-8 JSON (see clients/schema/protocol-v1.json). Parse the JSON with the library
 * of your choice; "action" is drain, terminate or clear.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static volatile sig_atomic_t stopping = 0;

static void on_signal(int signum) {
    (void)signum;
    stopping = 1;
}

static void default_endpoint(char *out, size_t size) {
    const char *events = getenv("FOREWARN_EVENTS");
    const char *runtime = getenv("FOREWARN_RUNTIME_DIR");
    if (events && *events)
        snprintf(out, size, "%s", events);
    else if (runtime && *runtime)
        snprintf(out, size, "ipc://%s/events", runtime);
    else
        snprintf(out, size, "ipc:///run/forewarn/events");
}

int main(int argc, char **argv) {
    char endpoint[4096];
    long count = -1;
    default_endpoint(endpoint, sizeof endpoint);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            char *end = NULL;
            count = strtol(argv[++i], &end, 10);
            if (!end || *end || count <= 0) {
                fprintf(stderr, "forewarn_sub: --count needs a positive number, got %s\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: forewarn_sub [ENDPOINT] [--count N]\n");
            return 2;
        } else {
            snprintf(endpoint, sizeof endpoint, "%s", argv[i]);
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    void *context = zmq_ctx_new();
    void *sub = zmq_socket(context, ZMQ_SUB);
    int linger = 0, timeout_ms = 500;
    zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    /* Subscribing to "notice" makes the agent replay every active notice to us at once. */
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "notice", 6);
    if (zmq_connect(sub, endpoint) != 0) {
        fprintf(stderr, "forewarn_sub: cannot connect to %s: %s\n", endpoint, zmq_strerror(errno));
        return 2;
    }
    fprintf(stderr, "forewarn_sub: listening on %s\n", endpoint);

    long seen = 0;
    while (!stopping && (count < 0 || seen < count)) {
        zmq_msg_t topic, body;
        zmq_msg_init(&topic);
        if (zmq_msg_recv(&topic, sub, 0) < 0) {
            zmq_msg_close(&topic);
            if (errno == EAGAIN || errno == EINTR)
                continue;
            fprintf(stderr, "forewarn_sub: receive failed: %s\n", zmq_strerror(errno));
            break;
        }
        int more = zmq_msg_more(&topic);
        zmq_msg_close(&topic);
        if (!more)
            continue; /* not a forewarn message: it always has two frames */
        zmq_msg_init(&body);
        if (zmq_msg_recv(&body, sub, 0) >= 0) {
            fwrite(zmq_msg_data(&body), 1, zmq_msg_size(&body), stdout);
            fputc('\n', stdout);
            fflush(stdout);
            seen++;
        }
        zmq_msg_close(&body);
    }
    zmq_close(sub);
    zmq_ctx_term(context);
    return 0;
}
