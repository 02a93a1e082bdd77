#ifndef SHAPES_H
#define SHAPES_H
int area(int w, int h);
int perimeter(int w, int h);
int volume(int w, int h, int d);
int diagonal2(int w, int h);
int scale(int v, int k);
#endif
