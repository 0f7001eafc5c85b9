/* slots.c - llama.cpp's slot routes: GET /slots, and POST /slots/{id}?action=save|restore|erase.
 *
 * Slot files live in the one folder --slot-save-path names, and a request only ever names a
 * file directly in it: a name with a '/', a "..", a leading '.', a NUL or over NAME_MAX bytes is
 * refused before the file system is asked, and the file is looked at through the folder's
 * descriptor without following a symbolic link, so neither a name nor a link planted in the
 * folder reaches anything outside it. The file format and its checks are the library's
 * (dsv41_session_save / _load): a restore verifies the whole file before it changes the slot. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"

int api_slots(server *sv, jbuf *out) {
    sched_slots_json(sv->sched, out);
    return 200;
}

/* A slot file's name from the body into *name; 0, or the status of the error written to out. */
static int file_name(const char *body, size_t n, char *name, size_t cap, jbuf *out) {
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(out, 400, NULL, "malformed JSON: %s", dsv41_error());
    const dsv41_json *f = dsv41_json_get(root, "filename");
    const char *s = dsv41_json_str(f);
    size_t len = dsv41_json_len(f);
    int status = 0;
    if (dsv41_json_type_of(f) != DSV41_JSON_STR) status = api_error(out, 400, "filename", "'filename' must be a string");
    else if (len == 0 || len >= cap || strlen(s) != len || s[0] == '.' || strchr(s, '/') || strstr(s, ".."))
        status = api_error(out, 400, "filename",
                           "'filename' must name a file in the slot folder: 1 to %zu bytes, no '/', no '..', no leading '.'", cap - 1);
    else memcpy(name, s, len + 1);
    dsv41_json_free(root);
    return status;
}

/* Whether name is a plain file directly in the folder (not a link, a folder or a device);
 * 0, or the status of the error written to out. must_exist: a missing file is an error too. */
static int plain_file(server *sv, const char *name, int must_exist, jbuf *out) {
    struct stat st;
    if (fstatat(sv->slot_dirfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
        if (errno != ENOENT) return api_error(out, 400, "filename", "slot file %s: %s", name, strerror(errno));
        return must_exist ? api_error(out, 404, "filename", "no slot file %s in the slot folder", name) : 0;
    }
    if (!S_ISREG(st.st_mode))
        return api_error(out, 400, "filename", "slot file %s is not a plain file (a link, a folder or a device)", name);
    return 0;
}

int api_slot_action(server *sv, const char *id, const char *action, const char *body, size_t n, jbuf *out) {
    if (!sv->slot_dir) return api_error(out, 501, NULL, "slot files are off: start the server with --slot-save-path DIR");
    char *end;
    long slot = id[0] >= '0' && id[0] <= '9' ? strtol(id, &end, 10) : -1;
    if (slot < 0 || *end || slot >= sv->n_slots)
        return api_error(out, 400, "id_slot", "'%s' is not a slot: they are 0 to %d", id, sv->n_slots - 1);
    slot_action a;
    if (action && !strcmp(action, "save")) a = SLOT_SAVE;
    else if (action && !strcmp(action, "restore")) a = SLOT_RESTORE;
    else if (action && !strcmp(action, "erase")) a = SLOT_ERASE;
    else return api_error(out, 400, "action", "action must be save, restore or erase");
    char name[NAME_MAX + 1] = "", path[PATH_MAX + NAME_MAX + 2] = "";
    int status = a == SLOT_ERASE ? 0 : file_name(body, n, name, sizeof name, out);
    if (!status && a != SLOT_ERASE) status = plain_file(sv, name, a == SLOT_RESTORE, out);
    if (status) return status;
    snprintf(path, sizeof path, "%s/%s", sv->slot_dir, name);
    int32_t n_tokens = 0;
    double t0 = now_s();
    slot_result r = sched_slot_action(sv->sched, (int32_t)slot, a, path, &n_tokens);
    double ms = 1e3 * (now_s() - t0);
    if (r == SLOT_BUSY) return api_error(out, 409, "id_slot", "slot %ld is serving a request; try again when it is done", slot);
    if (r == SLOT_FAILED && a == SLOT_RESTORE)
        return api_error(out, 400, "filename", "cannot restore %s: %s", name, dsv41_error());
    if (r == SLOT_FAILED) return api_error(out, 500, NULL, "cannot %s slot %ld: %s", action, slot, dsv41_error());
    struct stat st;
    long long bytes = a != SLOT_ERASE && !stat(path, &st) ? (long long)st.st_size : 0;
    jb_printf(out, "{\"id_slot\":%ld,", slot);
    if (a != SLOT_ERASE) {
        jb_puts(out, "\"filename\":");
        jb_str(out, name, strlen(name));
    }
    if (a == SLOT_SAVE) jb_printf(out, ",\"n_saved\":%d,\"n_written\":%lld,\"timings\":{\"save_ms\":%.3f}}", n_tokens, bytes, ms);
    else if (a == SLOT_RESTORE) jb_printf(out, ",\"n_restored\":%d,\"n_read\":%lld,\"timings\":{\"restore_ms\":%.3f}}", n_tokens, bytes, ms);
    else jb_printf(out, "\"n_erased\":%d}", n_tokens);
    return 200;
}
