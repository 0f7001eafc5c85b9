/* embed.c - writes a file's bytes as a NUL-terminated C array: embed FILE SYMBOL > out.c */
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: embed FILE SYMBOL\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { fprintf(stderr, "embed: cannot open %s\n", argv[1]); return 1; }
    printf("/* generated from %s by tools/embed.c */\nconst char %s[] = {", argv[1], argv[2]);
    int c, n = 0;
    while ((c = fgetc(f)) != EOF) { printf("%s%s%d", n ? "," : "", n % 24 ? "" : "\n", c); n++; }
    printf("%s0};\n", n ? "," : "");
    fclose(f);
    return 0;
}
