#include "shapes.h"
int volume(int w, int h, int d) { return area(w, h) * d; }
