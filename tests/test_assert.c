/* test_assert.c - the library's assertions are on in the builds the tests run (DSV41_ASSERT is
 * compiled out only under NDEBUG): scratch marks restored in order pass, a mark restored after
 * its caller's ends the process with one line naming the condition; a batch that passed
 * dsv41_batch_forward's checks runs. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>

#include "model.h"
#include "scratch.h"
#include "testing.h"

/* Runs fn in a child with stderr in err [cap]; returns the child's wait status. */
static int in_child(void (*fn)(void), char *err, size_t cap) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void marks_in_order(void) {
    scratch_mark outer = scratch_begin();
    scratch_bytes(100);
    scratch_mark inner = scratch_begin();
    scratch_bytes(100);
    scratch_end(inner);
    scratch_end(outer);
}

/* the caller's mark restored first, then the inner one it made moot */
static void marks_out_of_order(void) {
    scratch_mark outer = scratch_begin();
    scratch_bytes(100);
    scratch_mark inner = scratch_begin();
    scratch_bytes(100);
    scratch_end(outer);
    scratch_end(inner);
}

int main(void) {
#ifdef NDEBUG
    CHECK(0, "the tests are built with NDEBUG: the assertions are off");
#endif
    char err[1024];
    int st = in_child(marks_in_order, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !*err, "marks in order: status %d, stderr '%s'", st, err);
    st = in_child(marks_out_of_order, err, sizeof err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "a mark out of order aborts: status %d", st);
    CHECK(strstr(err, "dsv41: ") == err && strstr(err, "scratch.c") && strstr(err, "assertion failed: mark.block"),
          "one line names the condition and its place: '%s'", err);
    CHECK(strchr(err, '\n') && strchr(err, '\n')[1] == 0, "exactly one line: '%s'", err);

    /* two sessions batched: the forward's own assertion of distinct sessions holds */
    dsv41_model *m = dsv41_model_builtin();
    dsv41_session *s[2] = {m ? dsv41_session_new(m) : NULL, m ? dsv41_session_new(m) : NULL};
    CHECK(s[0] && s[1], "the built-in model and two sessions: %s", dsv41_error());
    if (s[0] && s[1]) {
        const int32_t a[] = {2, 17, 47}, b[] = {5}, *ids[] = {a, b}, n[] = {3, 1};
        CHECK(dsv41_batch_forward(s, ids, n, 2, NULL) == 0, "a batch of two: %s", dsv41_error());
    }
    dsv41_session_free(s[0]);
    dsv41_session_free(s[1]);
    dsv41_model_free(m);
    return test_summary();
}
