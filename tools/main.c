#include <stdio.h>
int main(void) { puts("pagedhybrid: under construction"); return 0; }
