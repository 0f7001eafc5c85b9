/* session_file.c - a session on disk (dsv41_session_save / dsv41_session_load). */
#include "model.h"

int dsv41_session_save(const dsv41_session *s, const char *path) {
    (void)s;
    (void)path;
    return set_error("session: save is not implemented yet");
}

int dsv41_session_load(dsv41_session *s, const char *path) {
    (void)s;
    (void)path;
    return set_error("session: load is not implemented yet");
}
