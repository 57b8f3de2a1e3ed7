/* Print how many words are read on standard input. */
#include <stdio.h>

int main(void) {
    long words = 0;
    int c, last = ' ';
    while ((c = getchar()) != EOF) {
        if (c == ' ' || c == '\n')
            words++;
        last = c;
    }
    if (last != ' ' && last != '\n')
        words++;
    printf("%ld\n", words);
    return 0;
}
