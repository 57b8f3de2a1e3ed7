#!/bin/bash
# The reference fix: count the starts of words (a non-blank after a blank), then build.
set -euo pipefail
cat > /app/wordcount.c <<'C'
/* Print how many words are read on standard input. */
#include <stdio.h>

int main(void) {
    long words = 0;
    int c, in_word = 0;
    while ((c = getchar()) != EOF) {
        int blank = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!blank && !in_word)
            words++;
        in_word = !blank;
    }
    printf("%ld\n", words);
    return 0;
}
C
gcc -O2 -o /app/wordcount /app/wordcount.c
