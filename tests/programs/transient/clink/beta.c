#include "shapes.h"
int perimeter(int w, int h) { return 2 * (w + h); }
